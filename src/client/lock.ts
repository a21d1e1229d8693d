/**
 * A held lock on the client side: its fencing token and latest sequencer, background renewal, and an
 * AbortSignal that fires when the lease is lost or can no longer be proven live.
 *
 * Fail closed: the client cannot see the store's clock, so it keeps a local,
 * conservative deadline (the time the first acquire attempt or the last successful
 * renewal was *sent*, plus ttlMs), on the monotonic clock (performance.now), so
 * wall-clock jumps don't move it. If no renewal succeeds before that deadline minus a
 * safety margin, the lock is lost even though the server might still consider the
 * lease live.
 *
 * The deadline is judged on every use, not only by a timer: `lost`, `throwIfLost()`,
 * `remainingMs` and `fetch` read the clock themselves, so a stalled event loop (a long
 * GC, a busy loop) cannot make a lapsed lease look live to the code that resumes.
 */
import {
  AbortedError,
  errorFor,
  FenceUnavailableError,
  LeaseLostError,
  StaleTokenError,
  type FencegateError,
  type Problem,
} from './errors.js';
import { call, failure, problemMessage, type FetchLike } from './http.js';

/** Symbol.asyncDispose, or the symbol Node uses where the runtime does not define it yet. */
export const asyncDispose: typeof Symbol.asyncDispose =
  Symbol.asyncDispose ?? (Symbol.for('nodejs.asyncDispose') as typeof Symbol.asyncDispose);

/** The gateway's refusals that lock.fetch throws (typed) instead of returning as a Response. */
const GATEWAY_REFUSALS = new Set(['stale-token', 'lease-expired', 'token-invalid', 'fence-unavailable']);

export interface LeaseInfo {
  key: string;
  owner: string;
  leaseId: string;
  token: string;
  expiresAt: string;
  ttlMs: number;
  /** Signed sequencer for this lease (absent when the issuer has no sequencer keys). */
  sequencer?: string;
  /** Acquire only: true for the replay of an earlier grant. */
  replayed?: boolean;
  /** Acquire only: how long the issuer held the request before the granting store call. */
  waitedMs?: number;
}

export interface LockOptions {
  autoRenew: boolean;
  /** Renew every this many ms (default ttlMs / 3). */
  renewEveryMs?: number;
  /** Fire the signal this long before the local deadline (default max(20, ttlMs / 10)). */
  safetyMarginMs?: number;
  requestTimeoutMs: number;
  /** The credential for renew and release (the client's apiKey); never sent by fetch(). */
  headers?: Readonly<Record<string, string>>;
  /**
   * The caller's signal: when it fires, the lock ends (lock.signal fires with an
   * AbortedError whose cause is its reason) and is released in the background.
   */
  signal?: AbortSignal;
}

export class Lock {
  readonly key: string;
  readonly owner: string;
  readonly leaseId: string;
  readonly token: bigint;
  readonly ttlMs: number;
  /** Fires when the lease is lost: stop the work and do not write any more. */
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private localDeadline: number;
  private renewTimer: NodeJS.Timeout | null = null;
  private deadlineTimer: NodeJS.Timeout | null = null;
  private released = false;
  private latestSequencer: string | null;

  constructor(
    private readonly base: string,
    private readonly fetchImpl: FetchLike,
    lease: LeaseInfo,
    sentAt: number,
    private readonly options: LockOptions,
  ) {
    this.key = lease.key;
    this.owner = lease.owner;
    this.leaseId = lease.leaseId;
    this.token = BigInt(lease.token);
    this.ttlMs = lease.ttlMs;
    this.latestSequencer = lease.sequencer ?? null;
    this.signal = this.controller.signal;
    this.localDeadline = sentAt + lease.ttlMs;
    if (this.pastDeadline()) {
      // Already lapsed when it reached us (a late response, a stall): never live.
      this.controller.abort(
        new LeaseLostError('the lease could have expired before the grant arrived', 0, null),
      );
      return;
    }
    this.armDeadline();
    if (options.autoRenew) this.scheduleRenew();
    this.follow(options.signal);
  }

  /** Ends the lock when the caller's signal fires; the listener goes when the lock ends. */
  private follow(caller: AbortSignal | undefined): void {
    if (caller === undefined) return;
    const onAbort = () => {
      this.lose(
        new AbortedError('the caller aborted the work holding this lock', 0, null, { cause: caller.reason }),
      );
      void this.release().catch(() => false); // free it for the next owner; it lapses otherwise
    };
    if (caller.aborted) return onAbort();
    caller.addEventListener('abort', onAbort, { once: true });
    this.signal.addEventListener('abort', () => caller.removeEventListener('abort', onAbort), { once: true });
  }

  /** The token as sent on the wire. */
  get fencingToken(): string {
    return this.token.toString(10);
  }

  /**
   * The sequencer from the latest acquire or renew answer (each renewal signs the new
   * expiry), or null when the issuer signs none. A credential for this lease: keep it secret.
   */
  get sequencer(): string | null {
    return this.latestSequencer;
  }

  /** Milliseconds until the lock counts as lost: the local deadline minus the safety margin. */
  get remainingMs(): number {
    if (this.lost) return 0;
    return Math.max(0, this.localDeadline - this.margin() - performance.now());
  }

  /** True once the lease is lost, released, or past the local deadline minus the margin. */
  get lost(): boolean {
    if (!this.signal.aborted && this.pastDeadline()) {
      this.lose(new LeaseLostError('lease could not be renewed before it expires', 0, null));
    }
    return this.signal.aborted;
  }

  private pastDeadline(): boolean {
    return performance.now() >= this.localDeadline - this.margin();
  }

  private url(op: string): string {
    return `${this.base}/v1/locks/${encodeURIComponent(this.key)}/${op}`;
  }

  private margin(): number {
    return this.options.safetyMarginMs ?? Math.max(20, Math.floor(this.ttlMs / 10));
  }

  private armDeadline(): void {
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    const wait = Math.max(0, this.localDeadline - this.margin() - performance.now());
    this.deadlineTimer = setTimeout(
      () => this.lose(new LeaseLostError('lease could not be renewed before it expires', 0, null)),
      wait,
    );
    this.deadlineTimer.unref();
  }

  private scheduleRenew(delay = this.options.renewEveryMs ?? Math.max(10, Math.floor(this.ttlMs / 3))): void {
    if (this.lost || this.released) return;
    this.renewTimer = setTimeout(() => void this.renewInBackground(), delay);
    this.renewTimer.unref();
  }

  private async renewInBackground(): Promise<void> {
    try {
      await this.renew();
      this.scheduleRenew();
    } catch (err) {
      if (this.lost || this.released) return;
      // Transient failure (store or network down): retry soon; the deadline timer fails closed.
      void err;
      this.scheduleRenew(Math.max(10, Math.floor(this.ttlMs / 10)));
    }
  }

  /**
   * Extends the lease by ttlMs. Throws LeaseLostError (and fires the signal) if it is gone;
   * a typed error (StoreUnavailableError, NetworkError, TimeoutError, …) if the renewal
   * could not be made (the lock stays until its deadline). Interrupted when the lock ends.
   */
  async renew(ttlMs = this.ttlMs): Promise<void> {
    if (this.lost) throw this.signal.reason; // a lapsed lease is never renewed back to life
    const sentAt = performance.now();
    const r = await call<LeaseInfo>(this.fetchImpl, this.url('renew'), {
      method: 'POST',
      body: { leaseId: this.leaseId, ttlMs },
      timeoutMs: this.options.requestTimeoutMs,
      headers: this.options.headers,
      signal: this.signal,
    });
    if (r.ok) {
      if (this.lost) throw this.signal.reason;
      this.localDeadline = sentAt + ttlMs;
      if (typeof r.body.sequencer === 'string') this.latestSequencer = r.body.sequencer;
      this.armDeadline();
      return;
    }
    if (r.status === 409) {
      const err = new LeaseLostError(problemMessage(r.status, r.problem), r.status, r.problem);
      this.lose(err);
      throw err;
    }
    throw r.error;
  }

  /**
   * Releases the lock; the signal fires (work is over). true: released; false: the issuer
   * says this lease did not hold the lock any more (it lapsed, or was taken over).
   * Throws a typed error when the release could not be made (the lease then lapses after
   * its TTL). Once called, later calls answer true without asking again.
   */
  async release(): Promise<boolean> {
    if (this.released) return true;
    this.released = true;
    this.stopTimers();
    // The work is over from now: the signal fires first, which also cuts a renewal in flight.
    if (!this.signal.aborted) this.controller.abort(new LeaseLostError('lock released', 0, null));
    const r = await call<{ released: boolean }>(this.fetchImpl, this.url('release'), {
      method: 'POST',
      body: { leaseId: this.leaseId },
      timeoutMs: this.options.requestTimeoutMs,
      headers: this.options.headers,
    });
    if (r.ok) return true;
    if (r.status === 409) return false;
    throw r.error;
  }

  /** `await using lock = await fg.acquire(…)`: released when the block ends (errors of the release are thrown). */
  async [asyncDispose](): Promise<void> {
    await this.release();
  }

  /**
   * fetch() with this lock's Fencing-Token header and its latest Fencing-Sequencer (when
   * the issuer signs them), aborted if the lease is lost. Use it for writes to routes
   * fenced by this lock: both headers suit every `check` (the gateway never forwards the
   * sequencer, and on sequencer routes the token must be the sequencer's).
   */
  async fetch(input: string | URL, init: RequestInit = {}): Promise<Response> {
    // Judged now, not by the timer: after a stall the timer has not run yet.
    if (this.lost) throw this.signal.reason as Error;
    const headers = new Headers(init.headers);
    headers.set('fencing-token', this.fencingToken);
    if (this.latestSequencer !== null) headers.set('fencing-sequencer', this.latestSequencer);
    const signal = init.signal ? AbortSignal.any([init.signal, this.signal]) : this.signal;
    const body = this.guardBody(init.body);
    let res: Response;
    try {
      res = await this.fetchImpl(input, {
        ...init,
        headers,
        signal,
        ...(body === undefined ? {} : { body }),
      });
    } catch (err) {
      // The lock's own end surfaces as its reason (LeaseLostError, …); the caller's abort as AbortedError.
      const ended = this.signal.aborted ? this.signal : init.signal;
      throw failure(`${init.method ?? 'GET'} ${String(input)}`, err, ended ?? undefined, null, 0);
    }
    const refusal = await gatewayRefusal(res);
    if (refusal === null) return res;
    if (refusal instanceof StaleTokenError) this.lose(refusal); // a newer owner exists: stop
    throw refusal;
  }

  /**
   * A streamed body is passed on chunk by chunk, each only while the lease is still live
   * by the clock; once it is not, the stream errors and the request is aborted.
   * (A string or buffer body leaves in one piece, after the check in fetch.)
   */
  private guardBody(body: RequestInit['body']): ReadableStream<Uint8Array> | undefined {
    if (!(body instanceof ReadableStream)) return undefined;
    const reader = (body as ReadableStream<Uint8Array>).getReader();
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        if (this.lost) {
          controller.error(this.signal.reason);
          await reader.cancel(this.signal.reason).catch(() => undefined);
          return;
        }
        const { done, value } = await reader.read();
        if (this.lost) {
          controller.error(this.signal.reason);
          await reader.cancel(this.signal.reason).catch(() => undefined);
          return;
        }
        if (done) controller.close();
        else controller.enqueue(value);
      },
      cancel: (reason) => reader.cancel(reason),
    });
  }

  /** Throws if the lease is lost (judged by the clock now): call between steps of long work. */
  throwIfLost(): void {
    if (this.lost) throw this.signal.reason;
  }

  /** Ends the lock without releasing it (a lock set whose other lock was lost); the signal fires with `err`. */
  abandon(err: FencegateError): void {
    this.lose(err);
  }

  private lose(err: FencegateError): void {
    this.stopTimers();
    if (!this.signal.aborted) this.controller.abort(err);
  }

  private stopTimers(): void {
    if (this.renewTimer) clearTimeout(this.renewTimer);
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    this.renewTimer = null;
    this.deadlineTimer = null;
  }
}

/**
 * The gateway's fence refusal in `res`, typed (StaleTokenError, FenceUnavailableError),
 * or null for any other answer (the upstream's, or a refusal of another kind): those stay
 * Responses for the caller to read.
 */
async function gatewayRefusal(res: Response): Promise<StaleTokenError | FenceUnavailableError | null> {
  if (res.status !== 409 && res.status !== 403 && res.status !== 503) return null;
  if (!(res.headers.get('content-type') ?? '').includes('application/problem+json')) return null;
  let problem: Problem;
  try {
    problem = (await res.clone().json()) as Problem;
  } catch {
    return null;
  }
  const code = typeof problem?.type === 'string' ? problem.type.replace(/^urn:fencegate:/, '') : '';
  if (!GATEWAY_REFUSALS.has(code)) return null;
  await res.body?.cancel().catch(() => undefined);
  const err = errorFor(
    problemMessage(res.status, problem),
    res.status,
    problem,
    res.headers.get('retry-after'),
  );
  return err as StaleTokenError | FenceUnavailableError;
}
