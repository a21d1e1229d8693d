/**
 * The fence: runs on headers only (the body is still an unread stream), decides, and
 * either refuses (a problem answer, not forwarded), or lets the request through to its
 * kind — after the drain barrier when lower-token writes are still in flight. In shadow
 * mode (enforce: false) every write is judged against the lock's shadow record (which
 * an admitted one raises), every refusal is counted and recorded, and the request goes
 * through; the enforced fence is not changed.
 */
import { ProblemError } from '../errors.js';
import type { EventLog } from '../observe/events.js';
import type { Metrics } from '../observe/metrics.js';
import type { FencingSettings } from '../policy/index.js';
import type { FencingToken } from '../tokens.js';
import type { GatewayRequestState } from './context.js';
import { awaitDrain, type DrainOutcome } from './drain.js';
import type { Exchange } from './exchange.js';
import { AdmissionHolds, type Hold } from './admission-hold.js';
import { InflightEntry } from './inflight.js';
import type { SessionObserver } from './observer.js';
import { sessionLapsed, type GatewaySessions, type SessionLease } from './session.js';
import type { StoreGuard } from './store-guard.js';
import type { SequencerVerifier } from '../sequencer/index.js';
import { Readable } from 'node:stream';
import { readBoundedBody } from '../http/body.js';
import { sendContinue } from '../http/continue.js';
import { kindFor } from './kinds/index.js';
import { deliveryBoundMs } from './lock-delay.js';
import type { ResetHold } from './reset-hold.js';
import type { DownstreamKind, WriteSet } from './kinds/types.js';
import { refusalRecorder } from './refusal-log.js';
import { StaleCache } from './stale-cache.js';
import {
  decide,
  fenceUnavailable,
  refusalNow,
  StaleRefusals,
  type Refusal,
  type Verdict,
  type VerdictInput,
} from './verdict.js';

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

/**
 * Fences a routed request on a route with `fencing`: true when it was refused (the
 * problem is answered), false when it goes on to its kind with `state.fence` set. A
 * promise only when it had to wait (the store, the barrier, the body).
 */
export interface FenceStep {
  (ex: Exchange, state: GatewayRequestState, fencing: FencingSettings): boolean | Promise<boolean>;
  /**
   * Refuses `ex` now when its refusal needs no waiting and no change of state (a missing,
   * malformed or known-stale token on an enforced route, a write naming no lock, no
   * session): true when it was refused and answered; false when it would have to wait or
   * go on, and nothing was done, recorded or answered (the refusal lane, lane.ts).
   */
  refuseNow(ex: Exchange, state: GatewayRequestState, fencing: FencingSettings): boolean;
}

export function fenceStep(opts: FenceOptions): FenceStep {
  const { guard, sessions, observer, metrics, events, sequencers, resetHold } = opts;

  const record = refusalRecorder(metrics, events);
  // Per process: what the store has already told this gateway is stale, per lock: of the
  // enforced fence, and of the shadow record (shadow-mode routes judge against that alone).
  const cache = new StaleCache();
  const shadowCache = new StaleCache();
  const refusals = new StaleRefusals();
  metrics.trackSize('stale-cache', () => cache.size);
  metrics.trackSize('shadow-stale-cache', () => shadowCache.size);
  metrics.trackSize('stale-refusals', () => refusals.size);
  // A hold outlives its write and sits in a long-lived map: the closure that finishes its
  // entry holds the lock and the request id only, never the request (ADR 0004, addendum 4).
  const finisher = (lock: string, requestId: string) => () => void guard.finish(lock, requestId);

  // Per process: admissions whose in-flight entry the same token's next writes may share,
  // renewed in the background while a lock is written to (admission-hold.ts).
  let renewals = 0;
  const holds = new AdmissionHolds(opts.admissionHoldMs, async (lock, token, lease, boundMs) => {
    const requestId = `hold-${(renewals += 1)}-${lease.id}`;
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
      result = await guard.admit(admission);
    } catch {
      return null; // the store is unavailable: the hold ends at its time, writes ask the store again
    }
    cache.learn(lock, token, true, result);
    if (!result.ok) return null;
    const finish = finisher(lock, requestId);
    if (result.lowerInflight > 0) {
      finish();
      return null;
    }
    return { highest: result.highest, finish };
  });

  metrics.trackSize('admission-holds', () => holds.size);

  /** Waits at the drain barrier: null when cleared, else the 503 to answer with. */
  async function passBarrier(
    ex: Exchange,
    state: GatewayRequestState,
    lease: SessionLease,
    lock: string,
    token: FencingToken,
    fencing: FencingSettings,
    signal: AbortSignal,
  ): Promise<{ problem: ProblemError; timeout: boolean } | null> {
    const route = state.match.route.name;
    const started = performance.now();
    let outcome: DrainOutcome | ProblemError;
    try {
      outcome = await awaitDrain({
        guard,
        observer,
        lease,
        lock,
        token,
        timeoutMs: fencing.drainTimeoutMs,
        signal,
        onLockDelay: () => waitsOnDelivered(ex, state, lock, token),
      });
    } catch (err) {
      outcome = fenceUnavailable(err, lock);
    }
    const label = outcome instanceof ProblemError ? 'error' : outcome;
    metrics.drainWaitSeconds.observe({ outcome: label }, (performance.now() - started) / 1000);
    if (outcome === 'cleared') return null;
    if (outcome instanceof ProblemError) return { problem: outcome, timeout: false };
    if (outcome === 'lapsed') return { problem: sessionLapsed(lock), timeout: false };
    if (outcome === 'timeout') metrics.fenceOf(route).drainTimeouts.n += 1;
    const detail =
      outcome === 'aborted'
        ? 'the client went away at the drain barrier'
        : `lower-token writes for lock "${lock}" still in flight after ${fencing.drainTimeoutMs} ms`;
    const problem = new ProblemError(
      'fence-unavailable',
      detail,
      { lock, token },
      { headers: { 'retry-after': '1' } },
    );
    return { problem, timeout: outcome === 'timeout' };
  }

  /**
   * A write waits at the barrier behind writes that a gone gateway session was delivering
   * (their lock-delay): counted and recorded as a `lock-delay` event (docs/events.md).
   */
  function waitsOnDelivered(
    ex: Exchange,
    state: GatewayRequestState,
    lock: string,
    token: FencingToken,
  ): void {
    const route = state.match.route.name;
    metrics.lockDelayWaits.inc({ route });
    events.record({
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

  /** What the verdict on `lock` is made from. */
  function verdictInput(
    ex: Exchange,
    route: GatewayRequestState['match']['route'],
    lock: string,
    recording: boolean | 'shadow',
    lease: SessionLease | null,
    boundMs: number,
  ): VerdictInput {
    return {
      // route.fencing is non-null here (checked by the caller): no per-request copy of the route.
      route: route as typeof route & { fencing: FencingSettings },
      lock,
      record: recording,
      deliveryBoundMs: boundMs,
      raw: ex.req,
      request: ex,
      lease,
      guard,
      sequencers,
      cache: recording === 'shadow' ? shadowCache : cache,
      holds,
      refusals,
      noSession: recording === true && lease === null,
    };
  }

  /** The lock's verdict: at once when it needs no waiting (known stale, a joined hold), else the store's. */
  function verdictOf(
    ex: Exchange,
    route: GatewayRequestState['match']['route'],
    lock: string,
    recording: boolean | 'shadow',
    lease: SessionLease | null,
    boundMs: number,
  ): Verdict | Promise<Verdict> {
    return decide(verdictInput(ex, route, lock, recording, lease, boundMs));
  }

  /**
   * A write whose locks cannot be read from it (the kind said why): counted and recorded;
   * enforced, answered (true); in shadow mode let through marked as refused (false).
   */
  function refusedUnread(
    ex: Exchange,
    state: GatewayRequestState,
    fencing: FencingSettings,
    problem: ProblemError,
  ): boolean {
    const refusal = { problem, reason: 'malformed' as const, lock: '', token: null, highest: null };
    record(ex, state, refusal, fencing.enforce);
    if (fencing.enforce) return refuse(ex, problem);
    state.fence = { mode: 'shadow-refused', lock: null, locks: [], token: null, entries: [] };
    return false;
  }

  /**
   * Counts and records a refused verdict; enforced, answers it (true), in shadow mode lets
   * the request through marked as refused (false).
   */
  function refused(
    ex: Exchange,
    state: GatewayRequestState,
    fencing: FencingSettings,
    verdict: Refusal,
    locks: readonly string[],
  ): boolean {
    record(ex, state, verdict, fencing.enforce);
    if (fencing.enforce) return refuse(ex, verdict.problem);
    state.fence = { mode: 'shadow-refused', lock: verdict.lock, locks, token: verdict.token, entries: [] };
    return false;
  }

  /**
   * Fences a routed request: its kind names the locks it writes (from the path and headers,
   * or from the body, read bounded), then each lock is judged. A write refused without
   * waiting (a known-stale token: the stale flood) is answered with no promise made.
   */
  const fenceRequest: FenceStep = (ex, state, fencing) => {
    const kind = kindOf(state);
    const writes = writeSet(ex, state, kind);
    if (writes.kind !== 'needs-body') return fenceWrites(ex, state, fencing, kind, writes);
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
      return fenceWrites(ex, state, fencing, kind, named);
    });
  };

  fenceRequest.refuseNow = (ex, state, fencing) => {
    // Shadow mode lets refusals through: nothing to answer now.
    if (!fencing.enforce) return false;
    const kind = kindOf(state);
    const writes = writeSet(ex, state, kind);
    if (writes.kind === 'needs-body' || writes.kind === 'read') return false;
    if (writes.kind === 'refuse') return refusedUnread(ex, state, fencing, writes.problem);
    const locks = lockOrder(writes.locks);
    const first = locks[0];
    if (first === undefined) return refuse(ex, noLock());
    const recording = kind.fenceAt === 'gateway';
    const lease = recording ? sessions.current() : null;
    const verdict = refusalNow(verdictInput(ex, state.match.route, first, recording, lease, 0));
    return verdict !== null && refused(ex, state, fencing, verdict, locks);
  };
  return fenceRequest;

  function fenceWrites(
    ex: Exchange,
    state: GatewayRequestState,
    fencing: FencingSettings,
    kind: DownstreamKind,
    writes: Exclude<WriteSet, { kind: 'needs-body' }>,
  ): boolean | Promise<boolean> {
    if (writes.kind === 'read') return false;
    if (writes.kind === 'refuse') return refusedUnread(ex, state, fencing, writes.problem);
    const locks = lockOrder(writes.locks);
    const first = locks[0];
    if (first === undefined) return refuse(ex, noLock());
    // Enforced and fenced here: the fence and an in-flight entry; fenced in the resource:
    // the store judges only (the resource compares-and-sets, so no entry and no
    // lock-delay is needed); shadow mode: the shadow record.
    const recording = !fencing.enforce ? 'shadow' : kind.fenceAt === 'gateway';
    // An admission that records is made under this process's gateway session; without a
    // valid one (the store has not answered a beat in time) nothing is admitted.
    const lease = recording === true ? sessions.current() : null;
    // The entry is delivering from its admission when the write leaves at once; a small
    // body still on its way is read first, and its entry marked delivering then.
    const bound = recording !== true ? 0 : deliveryBoundMs(state.match.route);
    if (bound > 0 && resetHold.leftMs(bound) > 0) return heldAfterReset(ex, state, first, bound);
    const boundNow = bound > 0 && smallBodyOnItsWay(ex) ? 0 : bound;
    const verdict = verdictOf(ex, state.match.route, first, recording, lease, boundNow);
    if (!(verdict instanceof Promise) && !verdict.ok) return refused(ex, state, fencing, verdict, locks);
    return admit(ex, state, fencing, kind, locks, { recording, lease, bound, boundNow }, verdict);
  }

  /** Judges every lock (the first's verdict given), then the barrier, then the small body. */
  async function admit(
    ex: Exchange,
    state: GatewayRequestState,
    fencing: FencingSettings,
    kind: DownstreamKind,
    locks: readonly string[],
    how: Recording,
    firstVerdict: Verdict | Promise<Verdict>,
  ): Promise<boolean> {
    const { recording, lease, bound, boundNow } = how;
    const route = state.match.route;
    // The AbortController is made only for a request that waits at the barrier: aborting
    // one builds a DOMException (with a stack), too costly to do on every response.
    let clientGone = false;
    let gone: AbortController | null = null;
    const entries: InflightEntry[] = [];
    // Holds of the store's own admissions, opened to the same token's next writes once cleared.
    const fresh: Hold[] = [];
    // Locks whose fresh entry was recorded not delivering (it had to wait): marked before sending.
    const undelivered: string[] = [];
    // Registered before the first wait. `on`, not `once`: the response closes once, and
    // `once` would wrap the listener in a bound function per request.
    ex.res.on('close', () => {
      clientGone = true;
      gone?.abort();
      for (const e of entries) e.clientClosed();
    });

    const admitted: Extract<Verdict, { ok: true }>[] = [];
    for (let i = 0; i < locks.length; i++) {
      const lock = locks[i]!;
      const verdict = await (i === 0 ? firstVerdict : verdictOf(ex, route, lock, recording, lease, boundNow));
      if (!verdict.ok) {
        // All or nothing: the locks admitted so far are released (their fences stay raised,
        // which only ever refuses older tokens).
        for (const e of entries) e.finish();
        return refused(ex, state, fencing, verdict, locks);
      }
      admitted.push(verdict);
      if (recording === true && lease !== null) {
        let hold = verdict.hold;
        if (hold === null) {
          hold = holds.admitted(lock, verdict.token, lease, verdict.highest, finisher(lock, ex.id), bound);
          fresh.push(hold);
          if (boundNow === 0 || verdict.lowerInflight > 0) undelivered.push(lock);
        }
        const joined = hold;
        const entry = new InflightEntry(lease, () => holds.leave(joined), bound);
        if (clientGone) entry.clientClosed(); // finished: it will not be forwarded
        entries.push(entry);
      }
    }
    const first = admitted[0]!;
    const token = first.token;
    if (recording === 'shadow') {
      metrics.fenceOf(route.name).admitted.n += 1;
      state.fence = { mode: 'shadow-admitted', lock: first.lock, locks, token, entries: [] };
      return false;
    }
    if (recording === false) {
      // The kind compares-and-sets inside the resource; the store judged issued/lease only.
      metrics.fenceOf(route.name).admitted.n += 1;
      state.fence = { mode: 'resource', lock: first.lock, locks, token, entries: [] };
      return false;
    }
    if (lease === null) throw new Error('an enforced admission without a gateway session');
    const finishAll = () => {
      for (const e of entries) e.finish();
    };
    if (resetHold.leftMs(bound) > 0 && !clientGone) {
      // The store was found reset while this write was being admitted.
      finishAll();
      return heldAfterReset(ex, state, first.lock, bound);
    }
    if (!lease.valid && !clientGone) {
      // The admission outlived this process's session: its entries may no longer count.
      finishAll();
      const problem = sessionLapsed(first.lock);
      record(ex, state, { ...first, reason: 'unavailable' }, true);
      return refuse(ex, problem);
    }
    for (const verdict of admitted) {
      if (verdict.lowerInflight === 0 || clientGone) continue;
      gone ??= new AbortController();
      const barrier = await passBarrier(ex, state, lease, verdict.lock, token, fencing, gone.signal);
      if (barrier !== null) {
        finishAll();
        // A client that went away gets no event; the answer goes nowhere but must not reach the upstream.
        if (!clientGone) {
          const { lock, token, highest } = verdict;
          record(
            ex,
            state,
            { lock, token, highest, reason: 'unavailable', drainTimeout: barrier.timeout },
            true,
          );
        }
        return refuse(ex, barrier.problem);
      }
    }
    if (smallBodyOnItsWay(ex)) {
      // Read whole before forwarding, as a proxy buffers a small body: the request then
      // leaves in one write, checked once against the session, instead of through a
      // per-chunk checking stream (forward-guard.ts). Its entries keep counting meanwhile.
      const read = await readBoundedBody(ex.req, ex.headers['content-length'], {
        maxBytes: SMALL_BODY_BYTES,
        idleMs: route.upload.idleTimeoutMs,
        totalMs: route.upload.timeoutMs,
        what: 'a fenced write',
        // Its entries stop counting once the session lapses: answered at once, never forwarded.
        stopWhen: (stop) => lease.track(() => stop(sessionLapsed(first.lock))),
      });
      if (!read.ok) {
        finishAll();
        if (read.problem.code === 'fence-unavailable')
          record(ex, state, { ...first, reason: 'unavailable' }, true);
        if (!ex.req.complete) ex.header('connection', 'close');
        return refuse(ex, read.problem);
      }
      ex.body = read.body;
    }
    if (undelivered.length > 0 && !clientGone) {
      const problem = await markDelivering(ex.id, undelivered, bound, first.lock);
      if (problem !== null) {
        finishAll();
        record(ex, state, { ...first, reason: 'unavailable' }, true);
        return refuse(ex, problem);
      }
    }
    if (fencing.check !== 'lease') for (const hold of fresh) holds.open(hold);
    const tallies = metrics.fenceOf(route.name);
    tallies.admitted.n += 1;
    if (fresh.length < entries.length) tallies.held.n += 1;
    state.fence = { mode: 'admitted', lock: first.lock, locks, token, entries };
    return false;
  }

  /**
   * A write that comes within its route's lock-delay after this gateway found the store
   * reset: 503 with the time left, counted and recorded as a `lock-delay` event.
   */
  function heldAfterReset(ex: Exchange, state: GatewayRequestState, lock: string, bound: number): true {
    const left = resetHold.leftMs(bound);
    const problem = new ProblemError(
      'fence-unavailable',
      `the fence store lost or replaced its state; writes on this route wait ${Math.ceil(left / 1000)} s ` +
        'more so that writes already delivered to the upstream are applied first',
      { lock },
      { headers: { 'retry-after': String(Math.max(1, Math.ceil(left / 1000))) } },
    );
    record(ex, state, { lock, token: null, highest: null, reason: 'unavailable', afterReset: true }, true);
    return refuse(ex, problem);
  }

  /**
   * Marks the entries that were recorded not delivering (they waited at the barrier or
   * for their body) as delivering, right before the write is sent: null when done, else
   * the 503 to answer (an entry is gone: its session ended meanwhile; or the store failed).
   */
  async function markDelivering(
    requestId: string,
    locks: readonly string[],
    bound: number,
    first: string,
  ): Promise<ProblemError | null> {
    try {
      for (const lock of locks) {
        if (!(await guard.deliver(lock, requestId, bound))) return sessionLapsed(lock);
      }
      return null;
    } catch (err) {
      return fenceUnavailable(err, first);
    }
  }
}

/** How a write's admission records, decided once per request (fenceWrites). */
interface Recording {
  recording: boolean | 'shadow';
  /** The session to record under (enforced, gateway-fenced), else null. */
  lease: SessionLease | null;
  /** The write's delivery bound (lock-delay.ts), 0 when nothing is recorded. */
  bound: number;
  /** The bound recorded at admission: 0 when the body is read first (marked delivering then). */
  boundNow: number;
}

/** A fenced write's body this small, still arriving, is read whole before it is forwarded. */
export const SMALL_BODY_BYTES = 64 * 1024;

/**
 * A body of a known length up to SMALL_BODY_BYTES that has not arrived whole yet, on a
 * request that does not wait for 100 Continue (whose client sends the body only once the
 * upstream answered 100: it streams).
 */
function smallBodyOnItsWay(ex: Exchange): boolean {
  const req = ex.req;
  if (ex.body !== req) return false;
  if (req.complete || req.headers.expect !== undefined) return false;
  const length = req.headers['content-length'];
  return length !== undefined && /^[0-9]{1,6}$/.test(length) && Number(length) <= SMALL_BODY_BYTES;
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

/** Answers the refusal; true: the request was refused. */
function refuse(ex: Exchange, problem: ProblemError): true {
  ex.answerProblem(problem);
  return true;
}
