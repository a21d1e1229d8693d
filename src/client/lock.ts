/**
 * A held lock on the client side: its fencing token, background renewal, and an
 * AbortSignal that fires when the lease is lost or can no longer be proven live.
 *
 * Fail closed: the client cannot see the store's clock, so it keeps a local,
 * conservative deadline (the time the grant or last successful renewal was *sent*
 * + ttlMs), on the monotonic clock (performance.now), so wall-clock jumps don't move it. If no renewal succeeds before that deadline minus a safety margin,
 * the signal fires even though the server might still consider the lease live.
 */
import { LeaseLostError } from './errors.js';
import { call, problemMessage, type FetchLike } from './http.js';

export interface LeaseInfo {
  key: string;
  owner: string;
  leaseId: string;
  token: string;
  expiresAt: string;
  ttlMs: number;
}

export interface LockOptions {
  autoRenew: boolean;
  /** Renew every this many ms (default ttlMs / 3). */
  renewEveryMs?: number;
  /** Fire the signal this long before the local deadline (default max(20, ttlMs / 10)). */
  safetyMarginMs?: number;
  requestTimeoutMs: number;
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
    this.signal = this.controller.signal;
    this.localDeadline = sentAt + lease.ttlMs;
    this.armDeadline();
    if (options.autoRenew) this.scheduleRenew();
  }

  /** The token as sent on the wire. */
  get fencingToken(): string {
    return this.token.toString(10);
  }

  /** Milliseconds until the local (conservative) deadline. */
  get remainingMs(): number {
    return Math.max(0, this.localDeadline - performance.now());
  }

  get lost(): boolean {
    return this.signal.aborted;
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

  /** Extends the lease by ttlMs. Throws LeaseLostError (and fires the signal) if it is gone. */
  async renew(ttlMs = this.ttlMs): Promise<void> {
    if (this.lost) throw this.signal.reason;
    const sentAt = performance.now();
    const r = await call<LeaseInfo>(this.fetchImpl, this.url('renew'), {
      method: 'POST',
      body: { leaseId: this.leaseId, ttlMs },
      timeoutMs: this.options.requestTimeoutMs,
    });
    if (r.ok) {
      if (this.lost) throw this.signal.reason;
      this.localDeadline = sentAt + ttlMs;
      this.armDeadline();
      return;
    }
    if (r.status === 409) {
      const err = new LeaseLostError(problemMessage(r.status, r.problem), r.status, r.problem);
      this.lose(err);
      throw err;
    }
    throw new Error(`renew failed: ${problemMessage(r.status, r.problem)}`);
  }

  /** Releases the lock. Idempotent; the signal fires (work is over). */
  async release(): Promise<boolean> {
    if (this.released) return true;
    this.released = true;
    this.stopTimers();
    try {
      const r = await call<{ released: boolean }>(this.fetchImpl, this.url('release'), {
        method: 'POST',
        body: { leaseId: this.leaseId },
        timeoutMs: this.options.requestTimeoutMs,
      });
      return r.ok;
    } finally {
      if (!this.lost) this.controller.abort(new LeaseLostError('lock released', 0, null));
    }
  }

  /**
   * fetch() with this lock's Fencing-Token header, aborted if the lease is lost.
   * Use it for writes to routes fenced by this lock.
   */
  fetch(input: string | URL, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    headers.set('fencing-token', this.fencingToken);
    const signal = init.signal ? AbortSignal.any([init.signal, this.signal]) : this.signal;
    return this.fetchImpl(input, { ...init, headers, signal });
  }

  /** Throws if the lease is lost: call between steps of long work. */
  throwIfLost(): void {
    this.signal.throwIfAborted();
  }

  private lose(err: LeaseLostError): void {
    this.stopTimers();
    if (!this.lost) this.controller.abort(err);
  }

  private stopTimers(): void {
    if (this.renewTimer) clearTimeout(this.renewTimer);
    if (this.deadlineTimer) clearTimeout(this.deadlineTimer);
    this.renewTimer = null;
    this.deadlineTimer = null;
  }
}
