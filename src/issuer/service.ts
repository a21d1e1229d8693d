/**
 * The lock issuer: validates requests, runs acquire (immediate or queued in the
 * store's FIFO), renew, release and inspect on a Store, and counts what happens.
 * Waiting is driven by store notifications (release, grant, a waiter leaving) and
 * by a timer at the next moment the state can change on its own (a lease's expiry
 * or a queued waiter's short liveness deadline): never by tight polling.
 */
import { randomUUID } from 'node:crypto';
import type { LeaseEnds } from '../observe/lease-ends.js';
import type { Metrics } from '../observe/metrics.js';
import { instrumentStore } from '../observe/store-metrics.js';
import type { FencingToken } from '../tokens.js';
import type { AcquireRequest, Lease, LockState, Store } from '../store/types.js';
import type {
  AcquireAnswer,
  AcquireInput,
  AcquireManyInput,
  IssuerAcquireManyResult,
  IssuerAcquireResult,
  OrderRefusal,
  OrderViolation,
  QueueInput,
} from './types.js';
import { acquireAll, type ManyOps } from './many.js';
import { canonicalOrder, OwnerHolds, type LockOrderMode } from './order.js';

export interface IssuerLimits {
  minTtlMs: number;
  maxTtlMs: number;
  /** Upper bound of waitMs for one acquire. */
  maxWaitMs: number;
  /** Ordering violations are counted (default), or also refused (`lock-order`). */
  lockOrder?: LockOrderMode;
}

export const DEFAULT_LIMITS: IssuerLimits = { minTtlMs: 100, maxTtlMs: 3_600_000, maxWaitMs: 300_000 };

/** At most this many keys in one multi-lock acquire. */
export const MAX_KEYS_PER_ACQUIRE = 64;

export type {
  AcquireAnswer,
  AcquireInput,
  AcquireManyInput,
  IssuerAcquireManyResult,
  IssuerAcquireResult,
  ManyGrant,
  OrderRefusal,
  OrderViolation,
  QueueInput,
} from './types.js';

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

/** Grants are tracked per lease id and key: a multi-lock lease has one id for several keys. */
const grantId = (key: string, leaseId: string) => `${leaseId}\n${key}`;

function storeRequest(input: QueueInput): AcquireRequest {
  const req: AcquireRequest = { key: input.key, owner: input.owner, ttlMs: input.ttlMs };
  if (input.requestId !== undefined) req.requestId = input.requestId;
  if (input.leaseId !== undefined) req.leaseId = input.leaseId;
  return req;
}

/** A lease this issuer granted, for fencegate_lease_hold_duration_seconds. Times are this process's ms. */
interface Grant {
  key: string;
  owner: string;
  /** The lease's token (decimal), for LeaseEnds. */
  token: string;
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
  /**
   * grant id (grantId: a lease id and its key; a multi-lock lease has one id for several
   * keys) -> grant, least recently granted or renewed first.
   */
  private readonly grants = new Map<string, Grant>();
  /** key -> grant id of the last grant tracked for it. */
  private readonly grantOfKey = new Map<string, string>();
  /** What each owner holds (by this issuer's reckoning), for ordering violations. */
  private readonly holds = new OwnerHolds();

  private readonly sweeper: NodeJS.Timeout;
  private readonly untrack: () => void;
  private readonly closing = new AbortController();
  /** Fires when the issuer shuts down: waiting acquires stop waiting and answer. */
  readonly closed: AbortSignal = this.closing.signal;

  constructor(
    store: Store,
    private readonly metrics: Metrics,
    readonly limits: IssuerLimits = DEFAULT_LIMITS,
    /** Where the ends of the leases this issuer granted are noted (the event log's `leaseEndedAt`). */
    private readonly leaseEnds: LeaseEnds | null = null,
  ) {
    this.store = instrumentStore(store, metrics);
    leaseEnds?.watchLive((key, token) => {
      const grant = this.grants.get(this.grantOfKey.get(key) ?? '');
      return grant !== undefined && grant.token === token && grant.expiresAt <= Date.now()
        ? grant.expiresAt
        : null;
    });
    this.untrack = metrics.trackSize('issuer-grants', () => this.grants.size);
    this.sweeper = setInterval(() => this.sweepLapsed(Date.now()), HOLD_SWEEP_MS);
    this.sweeper.unref();
  }

  async acquire(input: AcquireInput, signal?: AbortSignal): Promise<IssuerAcquireResult> {
    const refusal = this.checkOrder(input.owner, [input.key], input.onOrderViolation);
    if (refusal !== null) return refusal;
    const started = performance.now();
    // Not AbortSignal.any([signal, this.closed]): on Node 20 each one made registers with
    // the issuer's long-lived `closed` signal and stays reachable from it, one per acquire
    // ever made (issue 30: memory grew with the number of distinct locks). A plain listener
    // removed when the acquire settles costs nothing once it is over.
    const stop = signal === undefined ? null : eitherSignal(signal, this.closed);
    let result: IssuerAcquireResult;
    try {
      result = await this.acquireInner(
        { ...input, deadline: started + input.waitMs },
        started,
        stop?.signal ?? this.closed,
      );
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

  /**
   * Counts an ordering violation (owner holds a key after the lowest of `keys`) and tells
   * `notify`; in 'refuse' mode answers the refusal, otherwise null.
   */
  private checkOrder(
    owner: string,
    keys: readonly string[],
    notify?: (v: OrderViolation) => void,
  ): OrderRefusal | null {
    const key = keys[0];
    if (key === undefined) return null;
    const heldKey = this.holds.violatedBy(owner, key, Date.now());
    if (heldKey === null) return null;
    const refused = this.limits.lockOrder === 'refuse';
    this.metrics.lockOrderViolations.inc({ action: refused ? 'refused' : 'counted' });
    notify?.({ key, heldKey, refused });
    return refused ? { ok: false, reason: 'lock-order', heldKey } : null;
  }

  private async acquireInner(
    input: QueueInput,
    started: number,
    signal?: AbortSignal,
  ): Promise<AcquireAnswer> {
    const sent = performance.now();
    const first = await this.store.tryAcquire(storeRequest(input));
    if (first.ok) return this.granted(first, sent - started);
    if (first.reason !== 'held') return first;
    this.metrics.lockContention.inc();
    if (input.deadline <= performance.now()) return first;
    return this.waitInQueue(input, started, signal);
  }

  /**
   * Acquires every key in canonical order (compareKeys), each in its own FIFO queue as a
   * single acquire does, all under one lease id; all or nothing: a key that stays held
   * until the deadline, a refusal, an abort or a store failure releases what was taken.
   * While it waits for a later key, the leases already taken are renewed. Once the last is
   * granted, the others are renewed once more, so that every lease lives at least ttlMs
   * from the last grant (waitedMs).
   */
  async acquireMany(input: AcquireManyInput, signal?: AbortSignal): Promise<IssuerAcquireManyResult> {
    const keys = canonicalOrder(input.keys);
    const refusal = this.checkOrder(input.owner, keys, input.onOrderViolation);
    if (refusal !== null) return refusal;
    const started = performance.now();
    const stop = signal === undefined ? null : eitherSignal(signal, this.closed);
    let result: IssuerAcquireManyResult;
    try {
      result = await acquireAll(this.manyOps(), { ...input, keys }, started, stop?.signal ?? this.closed);
    } finally {
      stop?.release();
    }
    const seconds = (performance.now() - started) / 1000;
    this.metrics.acquireSeconds.observe({ outcome: result.ok ? 'granted' : 'held' }, seconds);
    if (result.ok) for (const lease of result.issued) this.trackGrant(lease);
    if (result.ok) this.metrics.tokensIssued.inc(result.issued.length);
    return result;
  }

  /** What acquireAll (./many.ts) needs of the issuer: one key's acquire and the store. */
  private manyOps(): ManyOps {
    return {
      acquireOne: (input, started, signal) => this.acquireInner(input, started, signal),
      store: this.store,
      renewEveryMs: (ttlMs) => Math.max(10, Math.min(WAITER_BEAT_MS, Math.floor(ttlMs / 3))),
    };
  }

  private granted(
    r: {
      lease: Lease;
      replayed: boolean;
      tookOverExpired: boolean;
      lapsed: { owner: string; token: FencingToken } | null;
    },
    waitedMs: number,
  ): AcquireAnswer {
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
    input: QueueInput,
    started: number,
    signal?: AbortSignal,
  ): Promise<AcquireAnswer> {
    const waiterId = randomUUID();
    const { deadline, tick } = input;
    let nextTick = tick === undefined ? Infinity : performance.now() + tick.everyMs;
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
        if (tick !== undefined && now >= nextTick) {
          await tick.run();
          nextTick = performance.now() + tick.everyMs;
        }
        const sent = performance.now();
        const r = await this.store.tryAcquire({ ...storeRequest(input), waiterId });
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
        const untilBeat = Math.max(1, Math.min(nextBeat, nextTick) - performance.now());
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
    const id = grantId(key, leaseId);
    if (r.ok) {
      const grant = this.grants.get(id);
      if (grant !== undefined) {
        grant.expiresAt = Date.now() + r.lease.ttlMs;
        this.grants.delete(id); // to the back: the sweep meets the least recently renewed first
        this.grants.set(id, grant);
      }
    } else {
      this.metrics.leaseRenewFailures.inc();
      this.endGrant(id, 'expired', Date.now());
    }
    return r;
  }

  async release(key: string, leaseId: string) {
    const r = await this.store.release(key, leaseId);
    const id = grantId(key, leaseId);
    if (!r.ok) {
      this.metrics.releaseOwnerMismatch.inc();
      this.endGrant(id, 'expired', Date.now()); // it no longer held the lock: it lapsed
    } else {
      this.endGrant(id, 'released', Date.now());
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
    const id = grantId(lease.key, lease.leaseId);
    const grant: Grant = {
      key: lease.key,
      owner: lease.owner,
      token: lease.token.toString(10),
      grantedAt: now,
      expiresAt: now + lease.ttlMs,
    };
    this.grants.set(id, grant);
    this.grantOfKey.set(lease.key, id);
    this.holds.add(lease.owner, id, grant);
    for (const [id, grant] of this.grants) {
      if (this.grants.size <= MAX_TRACKED_GRANTS) break;
      this.forget(id, grant);
    }
  }

  private endGrant(id: string, end: 'released' | 'expired', now: number): void {
    const grant = this.grants.get(id);
    if (grant === undefined) return;
    this.forget(id, grant);
    const until = end === 'released' ? now : Math.min(now, grant.expiresAt);
    this.leaseEnds?.note(grant.key, grant.token, until);
    this.metrics.holdSeconds.observe({ end }, Math.max(0, until - grant.grantedAt) / 1000);
  }

  private forget(id: string, grant: Grant): void {
    this.grants.delete(id);
    this.holds.remove(grant.owner, id);
    if (this.grantOfKey.get(grant.key) === id) this.grantOfKey.delete(grant.key);
  }

  /** Observes the leases that lapsed unreleased. */
  private sweepLapsed(now: number): void {
    for (const [id, grant] of this.grants) if (grant.expiresAt <= now) this.endGrant(id, 'expired', now);
  }
}
