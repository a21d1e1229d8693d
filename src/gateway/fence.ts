/**
 * The fence: runs on headers only (the body is still an unread stream), decides, and
 * either refuses (a problem answer, not forwarded), or lets the request through to its
 * kind — after the drain barrier when lower-token writes are still in flight. In shadow
 * mode (enforce: false) every write is judged against the lock's shadow record (which
 * an admitted one raises), every refusal is counted and recorded, and the request goes
 * through; the enforced fence is not changed. One Fence per gateway holds the
 * process-wide collaborators (the store guard, sessions, stale caches, admission holds,
 * the Judge that makes verdicts, the reset hold, metrics and events); each write that
 * has to wait or go on is carried through by an Admission of its own (admission.ts).
 */
import { ProblemError } from '../errors.js';
import type { EventLog } from '../observe/events.js';
import type { Metrics } from '../observe/metrics.js';
import type { FencingSettings } from '../policy/index.js';
import type { FencingToken } from '../tokens.js';
import type { GatewayRequestState } from './context.js';
import type { Exchange } from './exchange.js';
import { AdmissionHolds } from './admission-hold.js';
import { Admission, refuse, type AdmissionSite } from './admission.js';
import type { SessionObserver } from './observer.js';
import type { GatewaySessions, SessionLease } from './session.js';
import type { StoreGuard } from './store-guard.js';
import type { SequencerVerifier } from '../sequencer/index.js';
import { Readable } from 'node:stream';
import { readBoundedBody } from '../http/body.js';
import { sendContinue } from '../http/continue.js';
import { kindFor } from './kinds/index.js';
import type { ResetHold } from './reset-hold.js';
import type { DownstreamKind, WriteSet } from './kinds/types.js';
import { refusalRecorder, type RecordRefusal } from './refusal-log.js';
import { StaleCache } from './stale-cache.js';
import { Judge, StaleRefusals, type Refusal } from './verdict.js';

export { SMALL_BODY_BYTES } from './admission.js';

export interface FenceOptions {
  guard: StoreGuard;
  sessions: GatewaySessions;
  observer: SessionObserver;
  metrics: Metrics;
  events: EventLog;
  /** Verifies `Fencing-Sequencer` on `check: sequencer` routes; null: no keys, every sequencer refused. */
  sequencers: SequencerVerifier | null;
  /** How long one admission serves the same token's next writes on a lock (0: never). */
  admissionHoldMs: number;
  /** After the store lost or replaced its state, writes wait their lock-delay (reset-hold.ts). */
  resetHold: ResetHold;
}

/** The fence as the data plane uses it (data-plane.ts). */
export interface FenceStep {
  /**
   * Fences a routed request on a route with `fencing`: true when it was refused (the
   * problem is answered), false when it goes on to its kind with `state.fence` set. A
   * promise only when it had to wait (the store, the barrier, the body).
   */
  step(ex: Exchange, state: GatewayRequestState, fencing: FencingSettings): boolean | Promise<boolean>;
  /**
   * Refuses `ex` now when its refusal needs no waiting and no change of state (a missing,
   * malformed or known-stale token on an enforced route, a write naming no lock, no
   * session): true when it was refused and answered; false when it would have to wait or
   * go on, and nothing was done, recorded or answered (the refusal lane, src/http/lane.ts).
   */
  refuseNow(ex: Exchange, state: GatewayRequestState, fencing: FencingSettings): boolean;
}

export class Fence implements FenceStep, AdmissionSite {
  readonly guard: StoreGuard;
  readonly sessions: GatewaySessions;
  readonly observer: SessionObserver;
  readonly metrics: Metrics;
  readonly resetHold: ResetHold;
  /** Counts and records a refused write (refusal-log.ts). */
  readonly record: RecordRefusal;
  /**
   * Per process: admissions whose in-flight entry the same token's next writes may share,
   * renewed in the background while a lock is written to (admission-hold.ts).
   */
  readonly holds: AdmissionHolds;
  readonly judge: Judge;
  private readonly events: EventLog;
  /** Per process: what the store has already told this gateway is stale, per lock, of the enforced fence. */
  private readonly cache = new StaleCache();
  private renewals = 0;

  constructor(opts: FenceOptions) {
    this.guard = opts.guard;
    this.sessions = opts.sessions;
    this.observer = opts.observer;
    this.metrics = opts.metrics;
    this.events = opts.events;
    this.resetHold = opts.resetHold;
    this.record = refusalRecorder(opts.metrics, opts.events);
    this.holds = new AdmissionHolds(opts.admissionHoldMs, (lock, token, lease, boundMs) =>
      this.renew(lock, token, lease, boundMs),
    );
    // Shadow-mode routes judge against the shadow record alone: a cache of its own.
    const shadowCache = new StaleCache();
    const refusals = new StaleRefusals();
    this.judge = new Judge({
      guard: opts.guard,
      sequencers: opts.sequencers,
      cache: this.cache,
      shadowCache,
      holds: this.holds,
      refusals,
    });
    this.metrics.trackSize('stale-cache', () => this.cache.size);
    this.metrics.trackSize('shadow-stale-cache', () => shadowCache.size);
    this.metrics.trackSize('stale-refusals', () => refusals.size);
    this.metrics.trackSize('admission-holds', () => this.holds.size);
  }

  /**
   * Fences a routed request: its kind names the locks it writes (from the path and headers,
   * or from the body, read bounded), then each lock is judged. A write refused without
   * waiting (a known-stale token: the stale flood) is answered with no promise made.
   */
  step(ex: Exchange, state: GatewayRequestState, fencing: FencingSettings): boolean | Promise<boolean> {
    const kind = kindOf(state);
    const writes = writeSet(ex, state, kind);
    if (writes.kind !== 'needs-body') return this.fenceWrites(ex, state, fencing, kind, writes);
    // The locks are in the body: read it (bounded), decide, and forward the same bytes.
    sendContinue(ex.req, ex.res);
    return readBoundedBody(ex.req, ex.headers['content-length'], {
      maxBytes: writes.maxBytes,
      idleMs: state.match.route.upload.idleTimeoutMs,
      totalMs: state.match.route.upload.timeoutMs,
      what: `the body of a ${ex.method} that names its locks`,
    }).then((read) => {
      if (!read.ok) {
        if (!ex.req.complete) ex.header('connection', 'close');
        return refuse(ex, read.problem);
      }
      ex.body = Readable.from([read.body]);
      const named = writes.locks(read.body);
      if (named.kind === 'needs-body') throw new Error(`kind "${kind.name}" asked for the body twice`);
      return this.fenceWrites(ex, state, fencing, kind, named);
    });
  }

  refuseNow(ex: Exchange, state: GatewayRequestState, fencing: FencingSettings): boolean {
    // Shadow mode lets refusals through: nothing to answer now.
    if (!fencing.enforce) return false;
    const kind = kindOf(state);
    const writes = writeSet(ex, state, kind);
    if (writes.kind === 'needs-body' || writes.kind === 'read') return false;
    if (writes.kind === 'refuse') return this.refusedUnread(ex, state, fencing, writes.problem);
    const locks = lockOrder(writes.locks);
    const first = locks[0];
    if (first === undefined) return refuse(ex, noLock());
    const record = kind.fenceAt === 'gateway';
    const lease = record ? this.sessions.current() : null;
    // route.fencing is non-null here (checked by the caller): no per-request copy of the route.
    const route = state.match.route as typeof state.match.route & { fencing: FencingSettings };
    const asked = { route, record, deliveryBoundMs: 0, raw: ex.req, request: ex, lease };
    const verdict = this.judge.refusalNow(asked, first);
    return verdict !== null && this.refused(ex, state, fencing, verdict, locks);
  }

  private fenceWrites(
    ex: Exchange,
    state: GatewayRequestState,
    fencing: FencingSettings,
    kind: DownstreamKind,
    writes: Exclude<WriteSet, { kind: 'needs-body' }>,
  ): boolean | Promise<boolean> {
    if (writes.kind === 'read') return false;
    if (writes.kind === 'refuse') return this.refusedUnread(ex, state, fencing, writes.problem);
    const locks = lockOrder(writes.locks);
    const first = locks[0];
    if (first === undefined) return refuse(ex, noLock());
    // Enforced and fenced here: the fence and an in-flight entry; fenced in the resource:
    // the store judges only (the resource compares-and-sets, so no entry and no
    // lock-delay is needed); shadow mode: the shadow record.
    const record = !fencing.enforce ? 'shadow' : kind.fenceAt === 'gateway';
    const admission = new Admission(this, ex, state, locks, record);
    const bound = admission.bound;
    if (bound > 0 && this.resetHold.leftMs(bound) > 0) return this.heldAfterReset(ex, state, first, bound);
    const verdict = this.judge.verdict(admission, first);
    if (!(verdict instanceof Promise) && !verdict.ok) return this.refused(ex, state, fencing, verdict, locks);
    return admission.admit(verdict);
  }

  /**
   * Counts and records a refused verdict; enforced, answers it (true), in shadow mode lets
   * the request through marked as refused (false).
   */
  refused(
    ex: Exchange,
    state: GatewayRequestState,
    fencing: FencingSettings,
    verdict: Refusal,
    locks: readonly string[],
  ): boolean {
    this.record(ex, state, verdict, fencing.enforce);
    if (fencing.enforce) return refuse(ex, verdict.problem);
    state.fence = { mode: 'shadow-refused', lock: verdict.lock, locks, token: verdict.token, entries: [] };
    return false;
  }

  /**
   * A write that comes within its route's lock-delay after this gateway found the store
   * reset: 503 with the time left, counted and recorded as a `lock-delay` event.
   */
  heldAfterReset(ex: Exchange, state: GatewayRequestState, lock: string, bound: number): true {
    const left = this.resetHold.leftMs(bound);
    const problem = new ProblemError(
      'fence-unavailable',
      `the fence store lost or replaced its state; writes on this route wait ${Math.ceil(left / 1000)} s ` +
        'more so that writes already delivered to the upstream are applied first',
      { lock },
      { headers: { 'retry-after': String(Math.max(1, Math.ceil(left / 1000))) } },
    );
    this.record(
      ex,
      state,
      { lock, token: null, highest: null, reason: 'unavailable', afterReset: true },
      true,
    );
    return refuse(ex, problem);
  }

  /**
   * A write waits at the barrier behind writes that a gone gateway session was delivering
   * (their lock-delay): counted and recorded as a `lock-delay` event (docs/events.md).
   */
  waitsOnDelivered(ex: Exchange, state: GatewayRequestState, lock: string, token: FencingToken): void {
    const route = state.match.route.name;
    this.metrics.lockDelayWaits.inc({ route });
    this.events.record({
      time: new Date().toISOString(),
      type: 'lock-delay',
      reason: 'delivered-write',
      route,
      lock,
      token: token.toString(10),
      highest: null,
      enforced: true,
      client: ex.ip,
      owner: null,
      method: ex.method,
      path: state.path,
    });
  }

  /**
   * How the store entry of a fresh admission is finished once its hold is over. A hold
   * outlives its write and sits in a long-lived map: the closure holds the lock and the
   * request id only, never the request (ADR 0004, addendum 4).
   */
  finisher(lock: string, requestId: string): () => void {
    const guard = this.guard;
    return () => void guard.finish(lock, requestId);
  }

  /**
   * A write whose locks cannot be read from it (the kind said why): counted and recorded;
   * enforced, answered (true); in shadow mode let through marked as refused (false).
   */
  private refusedUnread(
    ex: Exchange,
    state: GatewayRequestState,
    fencing: FencingSettings,
    problem: ProblemError,
  ): boolean {
    const refusal = { problem, reason: 'malformed' as const, lock: '', token: null, highest: null };
    this.record(ex, state, refusal, fencing.enforce);
    if (fencing.enforce) return refuse(ex, problem);
    state.fence = { mode: 'shadow-refused', lock: null, locks: [], token: null, entries: [] };
    return false;
  }

  /** A hold's renewal (AdmissionHolds' Renew): a fresh store admission made in the background. */
  private async renew(lock: string, token: FencingToken, lease: SessionLease, boundMs: number) {
    const requestId = `hold-${(this.renewals += 1)}-${lease.id}`;
    const admission = {
      lock,
      token,
      check: 'token' as const,
      requestId,
      session: lease.id,
      record: true,
      deliveryBoundMs: boundMs,
    };
    let result;
    try {
      result = await this.guard.admit(admission);
    } catch {
      return null; // the store is unavailable: the hold ends at its time, writes ask the store again
    }
    this.cache.learn(lock, token, true, result);
    if (!result.ok) return null;
    const finish = this.finisher(lock, requestId);
    if (result.lowerInflight > 0) {
      finish();
      return null;
    }
    return { highest: result.highest, finish };
  }
}

/** The kind of the route's upstream. */
function kindOf(state: GatewayRequestState): DownstreamKind {
  const route = state.match.route;
  const kind = kindFor(route.upstream.kind);
  if (kind === null) throw new Error(`route "${route.name}" has an upstream of unknown kind`);
  return kind;
}

/** The locks a routed request writes, as its kind reads them from the path and headers. */
function writeSet(ex: Exchange, state: GatewayRequestState, kind: DownstreamKind): WriteSet {
  const url = ex.req.url ?? '/';
  const q = url.indexOf('?');
  return kind.writes(state.match.route, {
    method: state.method,
    path: state.routedPath,
    query: q < 0 ? '' : url.slice(q + 1),
    rawHeaders: ex.req.rawHeaders,
    params: state.match.params,
  });
}

/** Canonical order: two requests writing overlapping sets admit them in the same order. */
function lockOrder(locks: readonly string[]): readonly string[] {
  return locks.length === 1 ? locks : [...new Set(locks)].sort();
}

/** A write that names no lock would go through unchecked: it is refused instead. */
function noLock(): ProblemError {
  return new ProblemError('request-unfenceable', 'this write names no lock to fence it by');
}
