/**
 * TypeScript client for the fencegate lock issuer.
 *
 *   const fg = new FencegateClient({ url: 'http://127.0.0.1:9090' });
 *   await fg.withLock('order:42', { owner: 'worker-7', ttlMs: 10_000 }, async (lock) => {
 *     await lock.fetch('http://127.0.0.1:8080/orders/42', { method: 'PUT', body });
 *   });
 */
import { randomUUID } from 'node:crypto';
import { FencegateError, LeaseLostError, LockHeldError } from './errors.js';
import { call, credentialHeaders, problemMessage, type FetchLike } from './http.js';
import { Lock, type LeaseInfo } from './lock.js';

export { FencegateError, LockHeldError, LeaseLostError } from './errors.js';
export type { Problem } from './errors.js';
export { Lock } from './lock.js';
export type { LeaseInfo } from './lock.js';

export interface ClientOptions {
  /** Control listener base URL, e.g. http://127.0.0.1:9090 */
  url: string;
  fetch?: FetchLike;
  /** Per-request timeout for renew/release/inspect (default 5000). */
  requestTimeoutMs?: number;
  /** Attempts for an acquire whose response was lost (same requestId each time; default 3). */
  acquireAttempts?: number;
  /**
   * API key for a control listener with an auth file (`fencegate auth hash`), sent as
   * `Authorization: Bearer <key>` on every issuer call; never on `lock.fetch` (the data
   * listener and the upstream never see it).
   */
  apiKey?: string;
}

export interface AcquireOptions {
  owner: string;
  ttlMs?: number;
  /** Wait up to this long in the lock's FIFO queue (default 0: fail at once). */
  waitMs?: number;
  /** Idempotency id; generated when omitted, and reused across retries. */
  requestId?: string;
  autoRenew?: boolean;
  renewEveryMs?: number;
  safetyMarginMs?: number;
  signal?: AbortSignal;
}

export interface LockStatus {
  key: string;
  held: boolean;
  owner: string | null;
  token: string;
  expiresAt: string | null;
  waiters: number;
}

export class FencegateClient {
  private readonly base: string;
  private readonly fetchImpl: FetchLike;
  private readonly timeoutMs: number;
  private readonly attempts: number;
  private readonly headers: Readonly<Record<string, string>>;

  constructor(options: ClientOptions) {
    this.headers = credentialHeaders(options.apiKey);
    this.base = options.url.replace(/\/+$/, '');
    this.fetchImpl = options.fetch ?? fetch;
    this.timeoutMs = options.requestTimeoutMs ?? 5000;
    this.attempts = Math.max(1, options.acquireAttempts ?? 3);
  }

  private lockUrl(key: string, op?: string): string {
    return `${this.base}/v1/locks/${encodeURIComponent(key)}${op ? `/${op}` : ''}`;
  }

  /**
   * Acquires the lock (waiting up to waitMs). Throws LockHeldError if it stays held, and
   * LeaseLostError if the lease granted for this request could already have expired
   * when the answer arrived (a late response, a stalled process, or a retry whose first
   * grant ended meanwhile): a lock past its deadline is never handed back as live.
   *
   * The deadline is measured from when the FIRST attempt was sent (retries reuse the
   * requestId and keep that time), plus the time the issuer says it held the request
   * before granting it (`waitedMs`, for a fresh grant only), plus ttlMs.
   */
  async acquire(key: string, options: AcquireOptions): Promise<Lock> {
    const ttlMs = options.ttlMs ?? 10_000;
    const waitMs = options.waitMs ?? 0;
    const requestId = options.requestId ?? randomUUID();
    const firstSentAt = performance.now();
    let lastError: unknown;
    for (let attempt = 0; attempt < this.attempts; attempt++) {
      try {
        const r = await call<LeaseInfo>(this.fetchImpl, this.lockUrl(key, 'acquire'), {
          method: 'POST',
          body: { owner: options.owner, ttlMs, waitMs, requestId },
          timeoutMs: waitMs + this.timeoutMs,
          signal: options.signal,
          headers: this.headers,
        });
        if (r.ok) return await this.handOver(r.body, firstSentAt, options);
        const msg = problemMessage(r.status, r.problem);
        if (r.problem?.type === 'urn:fencegate:replay-ended')
          throw new LeaseLostError(msg, r.status, r.problem);
        if (r.status === 409) throw new LockHeldError(msg, r.status, r.problem);
        if (r.status < 500) throw new FencegateError(msg, r.status, r.problem);
        lastError = new FencegateError(msg, r.status, r.problem);
      } catch (err) {
        if (err instanceof FencegateError && err.status < 500) throw err;
        if (options.signal?.aborted) throw err;
        lastError = err; // network failure or 5xx: retry with the same requestId (no double grant)
      }
      await new Promise((r) => setTimeout(r, 50 * 2 ** attempt));
    }
    throw lastError;
  }

  /** The Lock for a grant, unless its deadline passed already (then released and lost). */
  private async handOver(lease: LeaseInfo, firstSentAt: number, options: AcquireOptions): Promise<Lock> {
    const waited =
      lease.replayed !== true && typeof lease.waitedMs === 'number' && lease.waitedMs > 0
        ? lease.waitedMs
        : 0;
    const lock = new Lock(this.base, this.fetchImpl, lease, firstSentAt + waited, {
      autoRenew: options.autoRenew ?? true,
      renewEveryMs: options.renewEveryMs,
      safetyMarginMs: options.safetyMarginMs,
      requestTimeoutMs: this.timeoutMs,
      headers: this.headers,
    });
    if (!lock.lost) return lock;
    const reason = lock.signal.reason as LeaseLostError;
    await lock.release().catch(() => false); // free it for the next owner if it is still live
    throw reason;
  }

  /** Runs fn while holding the lock; fn gets the Lock (use lock.signal / lock.fetch). Always releases. */
  async withLock<T>(key: string, options: AcquireOptions, fn: (lock: Lock) => Promise<T>): Promise<T> {
    const lock = await this.acquire(key, options);
    try {
      return await fn(lock);
    } finally {
      await lock.release().catch(() => false);
    }
  }

  /** The lock's state, or null if no token was ever issued for it. */
  async inspect(key: string): Promise<LockStatus | null> {
    const r = await call<LockStatus>(this.fetchImpl, this.lockUrl(key), {
      method: 'GET',
      timeoutMs: this.timeoutMs,
      headers: this.headers,
    });
    if (r.ok) return r.body;
    if (r.status === 404) return null;
    throw new FencegateError(problemMessage(r.status, r.problem), r.status, r.problem);
  }
}

/** Adds a Fencing-Sequencer header to fetch options (for callers not using Lock.fetch). */
export function withFencingSequencer(init: RequestInit, sequencer: string): RequestInit {
  const headers = new Headers(init.headers);
  headers.set('fencing-sequencer', sequencer);
  return { ...init, headers };
}

/** Adds a Fencing-Token header to fetch options (for callers not using Lock.fetch). */
export function withFencingToken(init: RequestInit, token: bigint | string): RequestInit {
  const headers = new Headers(init.headers);
  headers.set('fencing-token', typeof token === 'bigint' ? token.toString(10) : token);
  return { ...init, headers };
}
