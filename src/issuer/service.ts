/**
 * The lock issuer: validates requests, runs acquire (immediate or queued in the
 * store's FIFO), renew, release and inspect on a Store, and counts what happens.
 * Waiting is driven by store notifications (release, grant, a waiter leaving) and
 * by a timer at the next moment the state can change on its own (a lease's expiry
 * or a queued waiter's short liveness deadline): never by tight polling.
 */
import { randomUUID } from 'node:crypto';
import type { Metrics } from '../observe/metrics.js';
import { instrumentStore } from '../observe/store-metrics.js';
import type { FencingToken } from '../tokens.js';
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
  | {
      ok: true;
      lease: Lease;
      replayed: boolean;
      /**
       * Milliseconds (this process's monotonic clock) from when the request reached the
       * issuer until the store call that granted it was sent: the grant, and so the
       * lease's start, came no earlier. 0 for a replay (granted by an earlier request).
       */
      waitedMs: number;
      /** The lapsed lease this grant took over (never released by its owner), or null. */
      lapsed: { owner: string; token: FencingToken } | null;
    }
  | { ok: false; reason: 'held'; blockedBy: 'lease' | 'queue'; retryAfterMs: number }
  | { ok: false; reason: 'replay-ended'; leaseId: string; token: FencingToken }
  | { ok: false; reason: 'exhausted' };

/**
 * A queued waiter's entry in the store counts for this long unless its issuer renews it
 * (every WAITER_BEAT_MS while it waits): a waiter whose issuer died (kill -9, a lost
 * host) stops blocking the queue within this time, not at the end of its whole waitMs.
 */
export const WAITER_LIVENESS_MS = 3000;
export const WAITER_BEAT_MS = 1000;
/** Hold-time bookkeeping (for the hold-seconds metric) remembers at most this many grants. */
export const MAX_TRACKED_GRANTS = 10_000;
/** How often leases that lapsed unreleased are looked for (and their hold time observed). */
export const HOLD_SWEEP_MS = 1000;

/** A lease this issuer granted, for fencegate_lease_hold_duration_seconds. Times are this process's ms. */
interface Grant {
  key: string;
  grantedAt: number;
  /** When the lease lapses unless renewed (grant or last renewal through this issuer + TTL). */
  expiresAt: number;
}

/**
 * A signal that aborts when `a` or `b` does, and `release` to unhook it from both: two
 * plain listeners, so a long-lived `b` keeps nothing of a finished acquire.
 */
export function eitherSignal(a: AbortSignal, b: AbortSignal): { signal: AbortSignal; release: () => void } {
  const both = new AbortController();
  const abort = () => both.abort();
  const release = () => {
    a.removeEventListener('abort', abort);
    b.removeEventListener('abort', abort);
  };
  if (a.aborted || b.aborted) both.abort();
  else {
    a.addEventListener('abort', abort, { once: true });
    b.addEventListener('abort', abort, { once: true });
  }
  return { signal: both.signal, release };
}

export class Issuer {
  /** The store, its calls timed and counted (fencegate_store_*). */
  readonly store: Store;
  /** leaseId -> grant, least recently granted or renewed first. */
  private readonly grants = new Map<string, Grant>();
  /** key -> leaseId of the last grant tracked for it. */
  private readonly grantOfKey = new Map<string, string>();
  private readonly sweeper: NodeJS.Timeout;
  private readonly untrack: () => void;
  private readonly closing = new AbortController();
  /** Fires when the issuer shuts down: waiting acquires stop waiting and answer. */
  readonly closed: AbortSignal = this.closing.signal;

  constructor(
    store: Store,
    private readonly metrics: Metrics,
    readonly limits: IssuerLimits = DEFAULT_LIMITS,
  ) {
    this.store = instrumentStore(store, metrics);
    this.untrack = metrics.trackSize('issuer-grants', () => this.grants.size);
    this.sweeper = setInterval(() => this.sweepLapsed(Date.now()), HOLD_SWEEP_MS);
    this.sweeper.unref();
  }

  async acquire(input: AcquireInput, signal?: AbortSignal): Promise<IssuerAcquireResult> {
    const started = performance.now();
    // Not AbortSignal.any([signal, this.closed]): on Node 20 each one made registers with
    // the issuer's long-lived `closed` signal and stays reachable from it, one per acquire
    // ever made (issue 30: memory grew with the number of distinct locks). A plain listener
    // removed when the acquire settles costs nothing once it is over.
    const stop = signal === undefined ? null : eitherSignal(signal, this.closed);
    let result: IssuerAcquireResult;
    try {
      result = await this.acquireInner(input, started, stop?.signal ?? this.closed);
    } finally {
      stop?.release();
    }
    const seconds = (performance.now() - started) / 1000;
    this.metrics.acquireSeconds.observe({ outcome: result.ok ? 'granted' : 'held' }, seconds);
    if (result.ok && !result.replayed) {
      this.metrics.tokensIssued.inc();
      this.trackGrant(result.lease);
    }
    return result;
  }

  private async acquireInner(
    input: AcquireInput,
    started: number,
    signal?: AbortSignal,
  ): Promise<IssuerAcquireResult> {
    const base = { key: input.key, owner: input.owner, ttlMs: input.ttlMs, requestId: input.requestId };
    const sent = performance.now();
    const first = await this.store.tryAcquire(base);
    if (first.ok) return this.granted(first, sent - started);
    if (first.reason !== 'held') return first;
    this.metrics.lockContention.inc();
    if (input.waitMs <= 0) return first;
    return this.waitInQueue(input, started, signal);
  }

  private granted(
    r: {
      lease: Lease;
      replayed: boolean;
      tookOverExpired: boolean;
      lapsed: { owner: string; token: FencingToken } | null;
    },
    waitedMs: number,
  ): IssuerAcquireResult {
    if (r.tookOverExpired) this.metrics.leasesExpired.inc();
    return {
      ok: true,
      lease: r.lease,
      replayed: r.replayed,
      waitedMs: r.replayed ? 0 : Math.floor(waitedMs),
      lapsed: r.lapsed,
    };
  }

  /**
   * Joins the key's FIFO queue and tries again whenever the state may have changed: a
   * store notification (release, grant, a waiter leaving) or a timer at the next moment
   * it can change on its own. The queue entry carries a short deadline
   * (WAITER_LIVENESS_MS), renewed from this loop, so renewals and attempts never race
   * (a renewal can never re-add an entry a grant just removed).
   */
  private async waitInQueue(
    input: AcquireInput,
    started: number,
    signal?: AbortSignal,
  ): Promise<IssuerAcquireResult> {
    const waiterId = randomUUID();
    const deadline = started + input.waitMs;
    let wake: (() => void) | null = null;
    let dirty: boolean;
    const unwatch = await this.store.watch(input.key, () => {
      dirty = true;
      wake?.();
    });
    this.metrics.lockWaiters.inc();
    let enqueued = false;
    let nextBeat = 0;
    try {
      for (;;) {
        dirty = false;
        const now = performance.now();
        if (now >= nextBeat) {
          const entryMs = Math.max(1, Math.min(deadline - now, WAITER_LIVENESS_MS));
          await this.store.enqueueWaiter(input.key, waiterId, entryMs);
          enqueued = true;
          nextBeat = now + WAITER_BEAT_MS;
        }
        const sent = performance.now();
        const r = await this.store.tryAcquire({
          key: input.key,
          owner: input.owner,
          ttlMs: input.ttlMs,
          requestId: input.requestId,
          waiterId,
        });
        if (r.ok) {
          enqueued = false; // the grant removed our queue entry atomically
          return this.granted(r, sent - started);
        }
        if (r.reason !== 'held') return r;
        const remaining = deadline - performance.now();
        if (remaining <= 0 || signal?.aborted) {
          this.metrics.acquireTimeouts.inc();
          return r;
        }
        if (dirty) continue; // a notification arrived while we were asking
        const untilBeat = Math.max(1, nextBeat - performance.now());
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, Math.max(1, Math.min(remaining, r.retryAfterMs, untilBeat)));
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
    if (r.ok) {
      const grant = this.grants.get(leaseId);
      if (grant !== undefined) {
        grant.expiresAt = Date.now() + r.lease.ttlMs;
        this.grants.delete(leaseId); // to the back: the sweep meets the least recently renewed first
        this.grants.set(leaseId, grant);
      }
    } else {
      this.metrics.leaseRenewFailures.inc();
      this.endGrant(leaseId, 'expired', Date.now());
    }
    return r;
  }

  async release(key: string, leaseId: string) {
    const r = await this.store.release(key, leaseId);
    if (!r.ok) {
      this.metrics.releaseOwnerMismatch.inc();
      this.endGrant(leaseId, 'expired', Date.now()); // it no longer held the lock: it lapsed
    } else {
      this.endGrant(leaseId, 'released', Date.now());
    }
    return r;
  }

  /** Ends every wait in progress (each answers lock-held) so the server can close promptly. */
  shutdown(): void {
    this.closing.abort();
    clearInterval(this.sweeper);
    this.untrack();
  }

  inspect(key: string): Promise<LockState | null> {
    return this.store.inspect(key);
  }

  /** Grants tracked for hold times (best effort, bounded): for tests and the metrics page. */
  get trackedGrants(): number {
    return this.grants.size;
  }

  /**
   * Hold times (fencegate_lease_hold_duration_seconds{end}) cover every lease this issuer granted: a
   * release ends it `released` (held until now); a refused renewal or release, a new
   * grant of the same key, or the sweep finding it past its expiry end it `expired`
   * (held until it lapsed). Only calls through this issuer are seen: a lease renewed or
   * released through another issuer process counts as expired here when it lapses by
   * this issuer's reckoning. Bounded: at most MAX_TRACKED_GRANTS entries (the least
   * recently granted or renewed are dropped first, unobserved), O(1) per grant.
   */
  private trackGrant(lease: Lease): void {
    const now = Date.now();
    const previous = this.grantOfKey.get(lease.key);
    if (previous !== undefined) this.endGrant(previous, 'expired', now);
    this.grants.set(lease.leaseId, { key: lease.key, grantedAt: now, expiresAt: now + lease.ttlMs });
    this.grantOfKey.set(lease.key, lease.leaseId);
    for (const [id, grant] of this.grants) {
      if (this.grants.size <= MAX_TRACKED_GRANTS) break;
      this.forget(id, grant);
    }
  }

  private endGrant(leaseId: string, end: 'released' | 'expired', now: number): void {
    const grant = this.grants.get(leaseId);
    if (grant === undefined) return;
    this.forget(leaseId, grant);
    const until = end === 'released' ? now : Math.min(now, grant.expiresAt);
    this.metrics.holdSeconds.observe({ end }, Math.max(0, until - grant.grantedAt) / 1000);
  }

  private forget(leaseId: string, grant: Grant): void {
    this.grants.delete(leaseId);
    if (this.grantOfKey.get(grant.key) === leaseId) this.grantOfKey.delete(grant.key);
  }

  /** Observes the leases that lapsed unreleased. */
  private sweepLapsed(now: number): void {
    for (const [id, grant] of this.grants) if (grant.expiresAt <= now) this.endGrant(id, 'expired', now);
  }
}
