/**
 * TypeScript client for the fencegate lock issuer (`import … from 'fencegate/client'`).
 *
 *   const fg = new FencegateClient({ url: 'http://127.0.0.1:9090' });
 *   await fg.withLock('order:42', { owner: 'worker-7', ttlMs: 10_000 }, async (lock) => {
 *     await lock.fetch('http://127.0.0.1:8080/orders/42', { method: 'PUT', body });
 *   });
 */
import { randomUUID } from 'node:crypto';
import { FencegateError, LeaseLostError, ReleaseError } from './errors.js';
import { backoffMs, call, credentialHeaders, pause, type CallResult, type FetchLike } from './http.js';
import { Lock, type LeaseInfo } from './lock.js';
import { LockSet } from './lock-set.js';

export {
  AbortedError,
  AuthError,
  BusyError,
  CODE_ERRORS,
  FencegateError,
  FenceUnavailableError,
  LeaseLostError,
  LockHeldError,
  LockOrderError,
  NetworkError,
  NotFoundError,
  ReleaseError,
  RequestError,
  StaleTokenError,
  StoreUnavailableError,
  TimeoutError,
  TokensExhaustedError,
  UnavailableError,
  UpstreamError,
} from './errors.js';
export type { Problem } from './errors.js';
export { Lock } from './lock.js';
export type { LeaseInfo } from './lock.js';
export { LockSet } from './lock-set.js';

/** The answer of POST /v1/locks/acquire-many. */
interface ManyInfo {
  owner: string;
  leaseId: string;
  expiresAt: string;
  ttlMs: number;
  locks: { key: string; token: string; sequencer?: string }[];
  replayed?: boolean;
  waitedMs?: number;
}

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
  /**
   * Stops the acquire (its queue wait and its backoff between retries: AbortedError), and
   * after the grant ends the lock: lock.signal fires and the lock is released.
   */
  signal?: AbortSignal;
}

/** What GET /v1/locks/{key} answers (docs/issuer.md). Tokens are decimal strings. */
export interface LockStatus {
  key: string;
  held: boolean;
  owner: string | null;
  /** The live lease's token, or the last token issued when none is live. */
  token: string;
  /** The highest token ever issued for the key. */
  issued: string;
  /** The highest token the gateway admitted for the key, or null. */
  highest: string | null;
  /** The highest token shadow-mode routes admitted for the key, or null. */
  shadowHighest: string | null;
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
    const lease = await this.withRetries(options.signal, () =>
      call<LeaseInfo>(this.fetchImpl, this.lockUrl(key, 'acquire'), {
        method: 'POST',
        body: { owner: options.owner, ttlMs, waitMs, requestId },
        timeoutMs: waitMs + this.timeoutMs,
        signal: options.signal,
        headers: this.headers,
      }),
    );
    return this.handOver(lease, firstSentAt, options);
  }

  /**
   * Acquires every key under one lease (POST /v1/locks/acquire-many): in the issuer's
   * canonical order, all or nothing, one token per key. Throws as acquire does;
   * LockHeldError names the key that stayed held (`err.lock`), and nothing is held then.
   */
  async acquireMany(keys: readonly string[], options: AcquireOptions): Promise<LockSet> {
    const ttlMs = options.ttlMs ?? 10_000;
    const waitMs = options.waitMs ?? 0;
    const requestId = options.requestId ?? randomUUID();
    const firstSentAt = performance.now();
    const many = await this.withRetries(options.signal, () =>
      call<ManyInfo>(this.fetchImpl, `${this.base}/v1/locks/acquire-many`, {
        method: 'POST',
        body: { keys, owner: options.owner, ttlMs, waitMs, requestId },
        timeoutMs: waitMs + this.timeoutMs,
        signal: options.signal,
        headers: this.headers,
      }),
    );
    const waited =
      many.replayed !== true && typeof many.waitedMs === 'number' ? Math.max(0, many.waitedMs) : 0;
    const locks = many.locks.map(
      (l) =>
        new Lock(
          this.base,
          this.fetchImpl,
          { ...l, owner: many.owner, leaseId: many.leaseId, expiresAt: many.expiresAt, ttlMs: many.ttlMs },
          firstSentAt + waited,
          this.lockOptions(options),
        ),
    );
    const set = new LockSet(locks);
    if (!set.lost) return set;
    const reason = set.signal.reason as FencegateError;
    await set.release().catch(() => false); // free them for the next owner if still live
    throw reason;
  }

  /**
   * One call with retries: a lost answer (no connection, a timeout) or a 5xx is tried
   * again with the same body (its requestId: never a double grant), after a jittered
   * backoff the caller's signal interrupts; a refusal is thrown typed at once.
   */
  private async withRetries<T>(
    signal: AbortSignal | undefined,
    send: () => Promise<CallResult<T>>,
  ): Promise<T> {
    let lastError: unknown;
    for (let attempt = 0; attempt < this.attempts; attempt++) {
      if (attempt > 0) await pause(backoffMs(attempt - 1), signal, 'acquire backoff');
      try {
        const r = await send();
        if (r.ok) return r.body;
        if (r.status < 500) throw r.error;
        lastError = r.error;
      } catch (err) {
        if (err instanceof FencegateError && err.status >= 400 && err.status < 500) throw err;
        if (signal?.aborted) throw err;
        lastError = err; // network failure, timeout or 5xx: retry with the same requestId
      }
    }
    throw lastError;
  }

  /** The Lock for a grant, unless its deadline passed already (then released and lost). */
  private async handOver(lease: LeaseInfo, firstSentAt: number, options: AcquireOptions): Promise<Lock> {
    const waited =
      lease.replayed !== true && typeof lease.waitedMs === 'number' && lease.waitedMs > 0
        ? lease.waitedMs
        : 0;
    const lock = new Lock(this.base, this.fetchImpl, lease, firstSentAt + waited, this.lockOptions(options));
    if (!lock.lost) return lock;
    const reason = lock.signal.reason as LeaseLostError;
    await lock.release().catch(() => false); // free it for the next owner if it is still live
    throw reason;
  }

  private lockOptions(options: AcquireOptions) {
    return {
      autoRenew: options.autoRenew ?? true,
      renewEveryMs: options.renewEveryMs,
      safetyMarginMs: options.safetyMarginMs,
      requestTimeoutMs: this.timeoutMs,
      headers: this.headers,
      signal: options.signal,
    };
  }

  /**
   * Runs fn while holding the lock; fn gets the Lock (use lock.signal / lock.fetch).
   * Always releases. fn's error is thrown as is; when fn succeeded but the release failed
   * (not reachable, or the lease no longer held), throws ReleaseError with fn's `value`.
   */
  async withLock<T>(key: string, options: AcquireOptions, fn: (lock: Lock) => Promise<T>): Promise<T> {
    return runHolding(await this.acquire(key, options), fn);
  }

  /** withLock for several keys at once (acquireMany): fn gets the LockSet (`set.lock(key)`). */
  async withLocks<T>(
    keys: readonly string[],
    options: AcquireOptions,
    fn: (locks: LockSet) => Promise<T>,
  ): Promise<T> {
    return runHolding(await this.acquireMany(keys, options), fn);
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
    throw r.error;
  }
}

/** Runs fn holding `held`, then releases it; a failed release after a successful fn is a ReleaseError. */
async function runHolding<H extends { release(): Promise<boolean> }, T>(
  held: H,
  fn: (h: H) => Promise<T>,
): Promise<T> {
  let value: T;
  try {
    value = await fn(held);
  } catch (err) {
    await held.release().catch(() => false); // fn's error is the one to see
    throw err;
  }
  let released: boolean;
  try {
    released = await held.release();
  } catch (err) {
    throw new ReleaseError(
      'the work finished, but its lock could not be released (it lapses after its TTL)',
      value,
      {
        cause: err,
      },
    );
  }
  if (!released) {
    throw new ReleaseError(
      'the work finished, but its lease was no longer held at release (it lapsed meanwhile)',
      value,
      {
        cause: new LeaseLostError('the issuer answered not-owner to the release', 409, null),
      },
    );
  }
  return value;
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
