/**
 * The lock issuer: validates requests, runs acquire (immediate or queued in the
 * store's FIFO), renew, release and inspect on a Store, and counts what happens.
 * Waiting is driven by store notifications (release, a waiter leaving) and by a
 * timer at the next moment the state can change on its own (a lease's expiry or
 * a queued waiter's deadline): never by tight polling.
 */
import { randomUUID } from 'node:crypto';
import type { Metrics } from '../observe/metrics.js';
import type { Lease, LockState, Store } from '../store/types.js';

export interface IssuerLimits {
  minTtlMs: number;
  maxTtlMs: number;
  /** Upper bound of waitMs for one acquire. */
  maxWaitMs: number;
}

export const DEFAULT_LIMITS: IssuerLimits = { minTtlMs: 100, maxTtlMs: 3_600_000, maxWaitMs: 300_000 };

export interface AcquireInput {
  key: string;
  owner: string;
  ttlMs: number;
  waitMs: number;
  requestId?: string;
}

export type IssuerAcquireResult =
  { ok: true; lease: Lease; replayed: boolean } | { ok: false; reason: 'held'; retryAfterMs: number };

export class Issuer {
  private readonly grantedAt = new Map<string, number>();
  private readonly closing = new AbortController();
  /** Fires when the issuer shuts down: waiting acquires stop waiting and answer. */
  readonly closed: AbortSignal = this.closing.signal;

  constructor(
    readonly store: Store,
    private readonly metrics: Metrics,
    readonly limits: IssuerLimits = DEFAULT_LIMITS,
  ) {}

  async acquire(input: AcquireInput, signal?: AbortSignal): Promise<IssuerAcquireResult> {
    const started = process.hrtime.bigint();
    const stop = signal ? AbortSignal.any([signal, this.closed]) : this.closed;
    const result = await this.acquireInner(input, stop);
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    this.metrics.acquireSeconds.observe({ outcome: result.ok ? 'granted' : 'held' }, seconds);
    if (result.ok && !result.replayed) {
      this.metrics.tokensIssued.inc();
      this.grantedAt.set(result.lease.leaseId, Date.now());
    }
    return result;
  }

  private async acquireInner(input: AcquireInput, signal?: AbortSignal): Promise<IssuerAcquireResult> {
    const base = { key: input.key, owner: input.owner, ttlMs: input.ttlMs, requestId: input.requestId };
    const first = await this.store.tryAcquire(base);
    if (first.ok) return this.granted(first);
    this.metrics.lockContention.inc();
    if (input.waitMs <= 0) return first;
    return this.waitInQueue(input, signal);
  }

  private granted(r: { lease: Lease; replayed: boolean; tookOverExpired: boolean }): IssuerAcquireResult {
    if (r.tookOverExpired) this.metrics.leasesExpired.inc();
    return { ok: true, lease: r.lease, replayed: r.replayed };
  }

  /** Joins the key's FIFO queue and tries again whenever the state may have changed. */
  private async waitInQueue(input: AcquireInput, signal?: AbortSignal): Promise<IssuerAcquireResult> {
    const waiterId = randomUUID();
    const deadline = Date.now() + input.waitMs;
    let wake: (() => void) | null = null;
    let dirty: boolean;
    const unwatch = await this.store.watch(input.key, () => {
      dirty = true;
      wake?.();
    });
    this.metrics.lockWaiters.inc();
    let enqueued = false;
    try {
      await this.store.enqueueWaiter(input.key, waiterId, input.waitMs);
      enqueued = true;
      for (;;) {
        dirty = false;
        const r = await this.store.tryAcquire({
          key: input.key,
          owner: input.owner,
          ttlMs: input.ttlMs,
          requestId: input.requestId,
          waiterId,
        });
        if (r.ok) {
          enqueued = false; // the grant removed our queue entry atomically
          return this.granted(r);
        }
        const remaining = deadline - Date.now();
        if (remaining <= 0 || signal?.aborted) {
          this.metrics.acquireTimeouts.inc();
          return { ok: false, reason: 'held', retryAfterMs: r.retryAfterMs };
        }
        if (dirty) continue; // a notification arrived while we were asking
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, Math.max(1, Math.min(remaining, r.retryAfterMs)));
          const onAbort = () => done();
          signal?.addEventListener('abort', onAbort, { once: true });
          function done() {
            clearTimeout(timer);
            signal?.removeEventListener('abort', onAbort);
            resolve();
          }
          wake = done;
        });
        wake = null;
      }
    } finally {
      this.metrics.lockWaiters.dec();
      unwatch();
      if (enqueued) await this.store.removeWaiter(input.key, waiterId).catch(() => undefined);
    }
  }

  async renew(key: string, leaseId: string, ttlMs: number) {
    const r = await this.store.renew(key, leaseId, ttlMs);
    if (!r.ok) this.metrics.leaseRenewFailures.inc();
    return r;
  }

  async release(key: string, leaseId: string) {
    const r = await this.store.release(key, leaseId);
    if (!r.ok) {
      this.metrics.releaseOwnerMismatch.inc();
    } else {
      const at = this.grantedAt.get(leaseId);
      if (at !== undefined) {
        this.grantedAt.delete(leaseId);
        this.metrics.holdSeconds.observe((Date.now() - at) / 1000);
      }
    }
    this.pruneGrantTimes();
    return r;
  }

  /** Ends every wait in progress (each answers lock-held) so the server can close promptly. */
  shutdown(): void {
    this.closing.abort();
  }

  inspect(key: string): Promise<LockState | null> {
    return this.store.inspect(key);
  }

  /** Hold times are best effort: forget grants older than the longest possible lease. */
  private pruneGrantTimes(): void {
    if (this.grantedAt.size < 10_000) return;
    const cutoff = Date.now() - this.limits.maxTtlMs;
    for (const [id, at] of this.grantedAt) if (at < cutoff) this.grantedAt.delete(id);
  }
}
