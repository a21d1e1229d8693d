/**
 * One fenced write's admission, from its first verdict to the moment it may be forwarded:
 * every lock judged (all or nothing), in-flight entries recorded (or holds joined), the
 * drain barrier passed, a small body read whole, entries marked delivering, and then
 * `state.fence` set for the kind to forward with; or, at any step, the entries finished
 * and the refusal answered. It is also the per-request facts its verdicts are made from
 * (VerdictRequest); the process-wide collaborators are its Fence's (fence.ts, seen here as an AdmissionSite).
 */
import type { IncomingMessage } from 'node:http';
import { ProblemError } from '../errors.js';
import { readBoundedBody } from '../http/body.js';
import type { CompiledRoute, FencingSettings } from '../policy/index.js';
import type { FencingToken } from '../tokens.js';
import type { Hold } from './admission-hold.js';
import type { GatewayRequestState } from './context.js';
import { awaitDrain, type DrainOutcome } from './drain.js';
import type { Exchange } from './exchange.js';
import { InflightEntry } from './inflight.js';
import { deliveryBoundMs } from './lock-delay.js';
import { sessionLapsed, type SessionLease } from './session.js';
import type { AdmissionHolds } from './admission-hold.js';
import type { SessionObserver } from './observer.js';
import type { RecordRefusal } from './refusal-log.js';
import type { ResetHold } from './reset-hold.js';
import type { GatewaySessions } from './session.js';
import type { StoreGuard } from './store-guard.js';
import type { Metrics } from '../observe/metrics.js';
import { fenceUnavailable, type Judge, type Refusal, type Verdict, type VerdictRequest } from './verdict.js';

/**
 * What an Admission uses of the process-wide fence (the Fence in fence.ts is one); stated
 * here so the import runs one way, from the fence to its admissions.
 */
export interface AdmissionSite {
  readonly guard: StoreGuard;
  readonly sessions: GatewaySessions;
  readonly observer: SessionObserver;
  readonly metrics: Metrics;
  readonly resetHold: ResetHold;
  readonly record: RecordRefusal;
  readonly holds: AdmissionHolds;
  readonly judge: Judge;
  refused(
    ex: Exchange,
    state: GatewayRequestState,
    fencing: FencingSettings,
    verdict: Refusal,
    locks: readonly string[],
  ): boolean;
  heldAfterReset(ex: Exchange, state: GatewayRequestState, lock: string, bound: number): true;
  waitsOnDelivered(ex: Exchange, state: GatewayRequestState, lock: string, token: FencingToken): void;
  finisher(lock: string, requestId: string): () => void;
}

/** A fenced write's body this small, still arriving, is read whole before it is forwarded. */
export const SMALL_BODY_BYTES = 64 * 1024;

type Admitted = Extract<Verdict, { ok: true }>;

/** Why a write did not pass the drain barrier: the 503 to answer, and whether it was the ordering timeout. */
interface Barred {
  problem: ProblemError;
  timeout: boolean;
}

export class Admission implements VerdictRequest {
  readonly route: CompiledRoute & { fencing: FencingSettings };
  readonly raw: IncomingMessage;
  /** Enforced and fenced here: the session the entries are recorded under (null: none valid, refused). */
  readonly lease: SessionLease | null;
  /** The write's delivery bound (lock-delay.ts), 0 when nothing is recorded. */
  readonly bound: number;
  /** The bound recorded at admission: 0 when the body is read first (marked delivering then). */
  readonly deliveryBoundMs: number;
  private readonly fencing: FencingSettings;
  private clientGone = false;
  /** Made only for a write that waits at the barrier: aborting one builds a DOMException (with a stack). */
  private gone: AbortController | null = null;
  // Made once the admission goes on past its first verdict (admit): a write refused at once makes none.
  private entries!: InflightEntry[];
  private admitted!: Admitted[];
  /** Holds of the store's own admissions, opened to the same token's next writes once cleared. */
  private fresh!: Hold[];
  /** Locks whose fresh entry was recorded not delivering (it had to wait): marked before sending. */
  private undelivered!: string[];

  /**
   * `record`: what the store's admission records (VerdictRequest.record). An admission
   * that records is made under this process's gateway session; without a valid one (the
   * store has not answered a beat in time) nothing is admitted.
   */
  constructor(
    private readonly fence: AdmissionSite,
    readonly request: Exchange,
    private readonly state: GatewayRequestState,
    readonly locks: readonly string[],
    readonly record: boolean | 'shadow',
  ) {
    // route.fencing is non-null on a fenced route: no per-request copy of the route.
    this.route = state.match.route as CompiledRoute & { fencing: FencingSettings };
    this.fencing = this.route.fencing;
    this.raw = request.req;
    this.lease = record === true ? fence.sessions.current() : null;
    this.bound = record !== true ? 0 : deliveryBoundMs(this.route);
    // The entry is delivering from its admission when the write leaves at once; a small
    // body still on its way is read first, and its entry marked delivering then.
    this.deliveryBoundMs = this.bound > 0 && smallBodyOnItsWay(request) ? 0 : this.bound;
  }

  /**
   * Judges every lock (the first's verdict given), then the barrier, then the small body:
   * true when the write was refused (answered), false when it goes on with `state.fence` set.
   */
  async admit(first: Verdict | Promise<Verdict>): Promise<boolean> {
    this.entries = [];
    this.admitted = [];
    this.fresh = [];
    this.undelivered = [];
    // Registered before the first wait. `on`, not `once`: the response closes once, and
    // `once` would wrap the listener in a bound function per request.
    this.request.res.on('close', () => this.clientClosed());
    const { locks } = this;
    for (let i = 0; i < locks.length; i++) {
      const verdict = await (i === 0 ? first : this.fence.judge.verdict(this, locks[i]!));
      if (!verdict.ok) return this.refused(verdict);
      this.enter(verdict);
    }
    if (this.record !== true) return this.passUnrecorded();
    const lease = this.lease;
    if (lease === null) throw new Error('an enforced admission without a gateway session');
    if (this.lostMeanwhile(lease)) return true;
    for (const verdict of this.admitted) {
      if (verdict.lowerInflight === 0 || this.clientGone) continue;
      const barred = await this.passBarrier(lease, verdict.lock, this.admitted[0]!.token);
      if (barred !== null) return this.refusedAtBarrier(verdict, barred);
    }
    if (smallBodyOnItsWay(this.request)) {
      const read = await this.readSmallBody(lease);
      if (!read.ok) return this.bodyRefused(read.problem);
      this.request.body = read.body;
    }
    if (this.undelivered.length > 0 && !this.clientGone) {
      const problem = await this.markDelivering();
      if (problem !== null) return this.unavailable(problem);
    }
    return this.passed();
  }

  /** The client went away: an entry not yet forwarded is finished, a wait at the barrier ends. */
  private clientClosed(): void {
    this.clientGone = true;
    this.gone?.abort();
    for (const e of this.entries) e.clientClosed();
  }

  /** Keeps an admitted lock's verdict and, when recorded, its in-flight entry (in the hold it joined or opens). */
  private enter(verdict: Admitted): void {
    this.admitted.push(verdict);
    const lease = this.lease;
    if (this.record !== true || lease === null) return;
    const { holds } = this.fence;
    const { lock } = verdict;
    let hold = verdict.hold;
    if (hold === null) {
      const finish = this.fence.finisher(lock, this.request.id);
      hold = holds.admitted(lock, verdict.token, lease, verdict.highest, finish, this.bound);
      this.fresh.push(hold);
      if (this.deliveryBoundMs === 0 || verdict.lowerInflight > 0) this.undelivered.push(lock);
    }
    const joined = hold;
    const entry = new InflightEntry(lease, () => holds.leave(joined), this.bound);
    if (this.clientGone) entry.clientClosed(); // finished: it will not be forwarded
    this.entries.push(entry);
  }

  /**
   * Shadow mode: it would have been admitted; fenced in the resource: the kind
   * compares-and-sets there, the store judged issued/lease only. Nothing was recorded.
   */
  private passUnrecorded(): false {
    const first = this.admitted[0]!;
    this.fence.metrics.fenceOf(this.route.name).admitted.n += 1;
    const mode = this.record === 'shadow' ? 'shadow-admitted' : 'resource';
    this.state.fence = { mode, lock: first.lock, locks: this.locks, token: first.token, entries: [] };
    return false;
  }

  /** Admitted and ready to be forwarded: its fresh holds opened, counted, `state.fence` set. */
  private passed(): false {
    const first = this.admitted[0]!;
    if (this.fencing.check !== 'lease') for (const hold of this.fresh) this.fence.holds.open(hold);
    const tallies = this.fence.metrics.fenceOf(this.route.name);
    tallies.admitted.n += 1;
    if (this.fresh.length < this.entries.length) tallies.held.n += 1;
    const { locks, entries } = this;
    this.state.fence = { mode: 'admitted', lock: first.lock, locks, token: first.token, entries };
    return false;
  }

  /**
   * The store was found reset, or this process's session lapsed, while the write was
   * being admitted: its entries may no longer count, so it is refused (true, answered).
   */
  private lostMeanwhile(lease: SessionLease): boolean {
    if (this.clientGone) return false;
    const first = this.admitted[0]!;
    if (this.fence.resetHold.leftMs(this.bound) > 0) {
      this.finishAll();
      return this.fence.heldAfterReset(this.request, this.state, first.lock, this.bound);
    }
    if (!lease.valid) return this.unavailable(sessionLapsed(first.lock));
    return false;
  }

  /** Waits at the drain barrier for `lock`: null when cleared, else why not. */
  private async passBarrier(lease: SessionLease, lock: string, token: FencingToken): Promise<Barred | null> {
    const { fence } = this;
    const timeoutMs = this.fencing.drainTimeoutMs;
    const signal = (this.gone ??= new AbortController()).signal;
    const started = performance.now();
    let outcome: DrainOutcome | ProblemError;
    try {
      outcome = await awaitDrain({
        guard: fence.guard,
        observer: fence.observer,
        lease,
        lock,
        token,
        timeoutMs,
        signal,
        onLockDelay: () => fence.waitsOnDelivered(this.request, this.state, lock, token),
      });
    } catch (err) {
      outcome = fenceUnavailable(err, lock);
    }
    const label = outcome instanceof ProblemError ? 'error' : outcome;
    fence.metrics.drainWaitSeconds.observe({ outcome: label }, (performance.now() - started) / 1000);
    if (outcome === 'cleared') return null;
    if (outcome === 'timeout') fence.metrics.fenceOf(this.route.name).drainTimeouts.n += 1;
    return barred(outcome, lock, token, timeoutMs);
  }

  /**
   * Reads the body whole before forwarding, as a proxy buffers a small body: the request
   * then leaves in one write, checked once against the session, instead of through a
   * per-chunk checking stream (forward-guard.ts). Its entries keep counting meanwhile.
   */
  private readSmallBody(lease: SessionLease): ReturnType<typeof readBoundedBody> {
    const ex = this.request;
    const lock = this.admitted[0]!.lock;
    return readBoundedBody(ex.req, ex.headers['content-length'], {
      maxBytes: SMALL_BODY_BYTES,
      idleMs: this.route.upload.idleTimeoutMs,
      totalMs: this.route.upload.timeoutMs,
      what: 'a fenced write',
      // Its entries stop counting once the session lapses: answered at once, never forwarded.
      stopWhen: (stop) => lease.track(() => stop(sessionLapsed(lock))),
    });
  }

  /**
   * Marks the entries that were recorded not delivering (they waited at the barrier or
   * for their body) as delivering, right before the write is sent: null when done, else
   * the 503 to answer (an entry is gone: its session ended meanwhile; or the store failed).
   */
  private async markDelivering(): Promise<ProblemError | null> {
    const requestId = this.request.id;
    try {
      for (const lock of this.undelivered) {
        if (!(await this.fence.guard.deliver(lock, requestId, this.bound))) return sessionLapsed(lock);
      }
      return null;
    } catch (err) {
      return fenceUnavailable(err, this.admitted[0]!.lock);
    }
  }

  /** All or nothing: the locks admitted so far are released (their fences stay raised, which only ever refuses older tokens). */
  private refused(verdict: Extract<Verdict, { ok: false }>): boolean {
    this.finishAll();
    return this.fence.refused(this.request, this.state, this.fencing, verdict, this.locks);
  }

  private refusedAtBarrier(verdict: Admitted, why: Barred): true {
    this.finishAll();
    // A client that went away gets no event; the answer goes nowhere but must not reach the upstream.
    if (!this.clientGone) {
      const { lock, token, highest } = verdict;
      const refusal = { lock, token, highest, reason: 'unavailable' as const, drainTimeout: why.timeout };
      this.fence.record(this.request, this.state, refusal, true);
    }
    return refuse(this.request, why.problem);
  }

  private bodyRefused(problem: ProblemError): true {
    const ex = this.request;
    this.finishAll();
    if (problem.code === 'fence-unavailable')
      this.fence.record(ex, this.state, { ...this.admitted[0]!, reason: 'unavailable' }, true);
    if (!ex.req.complete) ex.header('connection', 'close');
    return refuse(ex, problem);
  }

  /** Refused 503 after it was admitted: entries finished, counted and recorded as `unavailable`. */
  private unavailable(problem: ProblemError): true {
    this.finishAll();
    this.fence.record(this.request, this.state, { ...this.admitted[0]!, reason: 'unavailable' }, true);
    return refuse(this.request, problem);
  }

  private finishAll(): void {
    for (const e of this.entries) e.finish();
  }
}

/** The 503 of a write that did not pass the barrier (`outcome` not 'cleared'). */
function barred(
  outcome: Exclude<DrainOutcome, 'cleared'> | ProblemError,
  lock: string,
  token: FencingToken,
  timeoutMs: number,
): Barred {
  if (outcome instanceof ProblemError) return { problem: outcome, timeout: false };
  if (outcome === 'lapsed') return { problem: sessionLapsed(lock), timeout: false };
  const detail =
    outcome === 'aborted'
      ? 'the client went away at the drain barrier'
      : `lower-token writes for lock "${lock}" still in flight after ${timeoutMs} ms`;
  const problem = new ProblemError(
    'fence-unavailable',
    detail,
    { lock, token },
    { headers: { 'retry-after': '1' } },
  );
  return { problem, timeout: outcome === 'timeout' };
}

/**
 * A body of a known length up to SMALL_BODY_BYTES that has not arrived whole yet, on a
 * request that does not wait for 100 Continue (whose client sends the body only once the
 * upstream answered 100: it streams).
 */
export function smallBodyOnItsWay(ex: Exchange): boolean {
  const req = ex.req;
  if (ex.body !== req) return false;
  if (req.complete || req.headers.expect !== undefined) return false;
  const length = req.headers['content-length'];
  return length !== undefined && /^[0-9]{1,6}$/.test(length) && Number(length) <= SMALL_BODY_BYTES;
}

/** Answers the refusal; true: the request was refused. */
export function refuse(ex: Exchange, problem: ProblemError): true {
  ex.answerProblem(problem);
  return true;
}
