/**
 * The Store on Postgres (the embedded store is LMDB, src/store/lmdb/): it binds
 * the statements to one schema and delegates to locks.ts / fences.ts; it owns
 * watch (notifier.ts), epochs, health, housekeeping and close.
 */
import { randomUUID } from 'node:crypto';
import type { FencingToken } from '../../tokens.js';
import type {
  AcquireRequest,
  AcquireResult,
  AdmitRequest,
  AdmitResult,
  BeatResult,
  GrantRecord,
  ListLocksQuery,
  LockPage,
  InflightState,
  LockState,
  ReleaseResult,
  RenewResult,
  SessionRecord,
  Store,
  StoreHealth,
  StoreKind,
} from '../types.js';
import { big, ms, one, type SqlContext } from './context.js';
import { FenceBatcher, type BatcherOptions } from './batcher.js';
import { channelFor, type SqlDriver } from './driver.js';
import * as fences from './fences.js';
import * as locks from './locks.js';
import { KeyNotifier } from './notifier.js';
import { queriesFor, type EpochRow, type HealthRow, type PruneRow } from './queries.js';

/**
 * Housekeeping (expired idempotency records, waiters, in-flight entries) starts at most
 * this often per process, and a round repeats its batch while a batch came back full, so
 * it clears any backlog rather than a fixed number of rows per period. (Each grant also
 * deletes two expired idempotency records itself: see queries.sql, grant.)
 */
const PRUNE_EVERY_MS = 10_000;
const PRUNE_BATCH = 1000;
/** A round stops after this many full batches and goes on at the next round. */
const PRUNE_MAX_BATCHES = 500;

export interface SqlStoreOptions {
  namespace: string;
  /** Extra words for health().detail, e.g. the server's durability settings. */
  detail?: string;
  /** How admissions and finishes are grouped into statements (batcher.ts). */
  batching: BatcherOptions;
}

export class SqlStore implements Store {
  readonly kind: StoreKind;
  private readonly ctx: SqlContext;
  private readonly notifier: KeyNotifier;
  private readonly batcher: FenceBatcher;
  private readonly detail: string;
  private pruning: Promise<void> | null = null;
  // Housekeeping timer only: never used to judge a lease.
  private lastPrune = 0;
  private closing: Promise<void> | null = null;

  constructor(driver: SqlDriver, opts: SqlStoreOptions) {
    this.kind = driver.kind;
    const channel = channelFor(opts.namespace);
    this.ctx = { driver, q: queriesFor(opts.namespace), channel };
    this.notifier = new KeyNotifier(driver, channel);
    const ctx = this.ctx;
    this.batcher = new FenceBatcher(
      (finishes, admissions) => fences.runFenceBatch(ctx, finishes, admissions),
      opts.batching,
    );
    this.detail = `${driver.where}, schema "${opts.namespace}"${opts.detail ? `, ${opts.detail}` : ''}`;
  }

  /**
   * Runs the fence batch statement once (a shadow admission of the key '', which no lock
   * has), so the first fenced write does not pay for compiling and planning it on its
   * pooled connection.
   */
  async warm(): Promise<void> {
    const probe = { lock: '', token: 1n, check: 'token', requestId: '', session: '', record: false } as const;
    await fences.runFenceBatch(this.ctx, [], [probe]);
  }

  // ---- locks ----

  async tryAcquire(req: AcquireRequest): Promise<AcquireResult> {
    const result = await locks.tryAcquire(this.ctx, req);
    this.housekeep();
    return result;
  }

  renew(key: string, leaseId: string, ttlMs: number): Promise<RenewResult> {
    return locks.renew(this.ctx, key, leaseId, ttlMs);
  }

  release(key: string, leaseId: string): Promise<ReleaseResult> {
    return locks.release(this.ctx, key, leaseId);
  }

  inspect(key: string): Promise<LockState | null> {
    return locks.inspect(this.ctx, key);
  }

  enqueueWaiter(key: string, waiterId: string, waitMs: number): Promise<void> {
    return locks.enqueueWaiter(this.ctx, key, waiterId, waitMs);
  }

  removeWaiter(key: string, waiterId: string): Promise<void> {
    return locks.removeWaiter(this.ctx, key, waiterId);
  }

  listLocks(query: ListLocksQuery): Promise<LockPage> {
    return locks.listLocks(this.ctx, query);
  }

  recentGrants(key: string): Promise<GrantRecord[]> {
    return locks.recentGrants(this.ctx, key);
  }

  // ---- fences ----

  async admit(req: AdmitRequest): Promise<AdmitResult> {
    const result = await this.batcher.admit(req);
    if (req.record) this.housekeep();
    return result;
  }

  finish(lock: string, requestId: string): Promise<void> {
    return this.batcher.finish(lock, requestId);
  }

  deliver(lock: string, requestId: string, boundMs: number): Promise<boolean> {
    return fences.deliver(this.ctx, lock, requestId, boundMs);
  }

  lowerInflight(lock: string, token: FencingToken): Promise<InflightState> {
    return fences.lowerInflight(this.ctx, lock, token);
  }

  dropInflight(lock: string, sessions: readonly string[], maxBoundMs: number): Promise<void> {
    return fences.dropInflight(this.ctx, lock, sessions, maxBoundMs);
  }

  openSession(id: string, ttlMs: number): Promise<void> {
    return fences.openSession(this.ctx, id, ttlMs);
  }

  beatSession(id: string): Promise<BeatResult> {
    return fences.beatSession(this.ctx, id);
  }

  readSessions(ids: readonly string[] | null): Promise<Map<string, SessionRecord>> {
    return fences.readSessions(this.ctx, ids);
  }

  endSession(id: string, ifBeat: number | null): Promise<boolean> {
    return fences.endSession(this.ctx, id, ifBeat);
  }

  // ---- notifications ----

  watch(key: string, listener: () => void): Promise<() => void> {
    return this.notifier.watch(key, listener);
  }

  // ---- epochs ----

  async bumpEpoch(): Promise<{ id: string; floor: FencingToken }> {
    const r = one(await this.ctx.driver.query<EpochRow>(this.ctx.q.bump_epoch, [randomUUID()]), 'bump_epoch');
    return { id: r.id, floor: big(r.floor) };
  }

  // ---- lifecycle ----

  async now(): Promise<number> {
    const r = one(await this.ctx.driver.query<{ now: string }>(this.ctx.q.now), 'now');
    return ms(r.now);
  }

  async health(): Promise<StoreHealth> {
    try {
      const r = one(await this.ctx.driver.query<HealthRow>(this.ctx.q.health), 'health');
      const epoch = r.id !== null && r.floor !== null ? { id: r.id, floor: big(r.floor) } : null;
      return { ok: true, kind: this.kind, detail: this.detail, epoch };
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      return { ok: false, kind: this.kind, detail: why, epoch: null };
    }
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.notifier.clear();
      if (this.pruning) await this.pruning;
      await this.ctx.driver.close();
    })();
    return this.closing;
  }

  /**
   * Deletes expired housekeeping rows in the background, a round at most every
   * PRUNE_EVERY_MS; a round repeats while a batch came back full (up to
   * PRUNE_MAX_BATCHES), so cleanup keeps up with any sustained rate.
   */
  private housekeep(): void {
    if (this.closing || this.pruning) return;
    const t = Date.now();
    if (t - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = t;
    this.pruning = this.pruneRound()
      .catch(() => undefined) // best effort: the next round retries
      .finally(() => {
        this.pruning = null;
      });
  }

  private async pruneRound(): Promise<void> {
    for (let i = 0; i < PRUNE_MAX_BATCHES && !this.closing; i++) {
      const r = one(await this.ctx.driver.query<PruneRow>(this.ctx.q.prune, [PRUNE_BATCH]), 'prune');
      if (Math.max(r.grants, r.waiters, r.inflight) < PRUNE_BATCH) return;
    }
  }
}
