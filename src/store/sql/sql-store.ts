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
  IdempotentBegin,
  IdempotentBeginResult,
  IdempotentFinish,
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
  StoreReset,
} from '../types.js';
import { big, maxBig, ms, one, type SqlContext } from './context.js';
import { StoreUnavailableError } from '../../errors.js';
import { FenceBatcher, type BatcherOptions } from './batcher.js';
import { channelFor, type SqlDriver } from './driver.js';
import * as fences from './fences.js';
import * as idempotency from './idempotency.js';
import * as locks from './locks.js';
import { KeyNotifier } from './notifier.js';
import { queriesFor, type EpochRow, type HealthRow, type IdentityRow, type PruneRow } from './queries.js';
import { errorCode } from './driver.js';
import { ResetWatch } from '../reset.js';

/**
 * Housekeeping (expired idempotency records, waiters, in-flight entries) starts at most
 * this often per process, and a round repeats its batch while a batch came back full, so
 * it clears any backlog rather than a fixed number of rows per period. (Each grant also
 * deletes two expired idempotency records itself: see queries.sql, grant.)
 */
const PRUNE_EVERY_MS = 10_000;
/** The SQLSTATE check_identity raises (schema.sql): the tables are not the ones verified. */
const IDENTITY_CHANGED = 'FGRST';
/** Gateway session beats verify the store's identity again at most this often (ms). */
const VERIFY_EVERY_MS = 5_000;
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
  private verifying: Promise<void> | null = null;
  /** performance.now() of the last verification (beats verify again after VERIFY_EVERY_MS). */
  private lastVerify = -Infinity;
  // Housekeeping timer only: never used to judge a lease.
  private lastPrune = 0;
  private closing: Promise<void> | null = null;

  constructor(driver: SqlDriver, opts: SqlStoreOptions) {
    this.kind = driver.kind;
    const channel = channelFor(opts.namespace);
    this.ctx = {
      driver,
      q: queriesFor(opts.namespace),
      channel,
      verified: { oid: null },
      resets: new ResetWatch(),
    };
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

  // ---- identity (docs/adr/0019-store-identity.md) ----

  /**
   * Verifies that the store is the one whose state this process knew, and ties the epoch
   * to it: the identity now ('<system identifier>:<timeline>:<locks table oid>') against
   * the one that verified the epoch last. Another one (a restore that recreated the
   * tables, a point-in-time recovery or a promoted replica, another cluster) may hold
   * older state than was acknowledged: a new epoch above the store clock (and above
   * every token this process saw, when this process saw the change) starts before
   * anything is granted or admitted. Run at open, when a statement finds the tables
   * changed under it (SQLSTATE FGRST), and on the gateway session's beats.
   */
  verify(): Promise<void> {
    this.verifying ??= this.runVerify().finally(() => {
      this.verifying = null;
      this.lastVerify = performance.now();
    });
    return this.verifying;
  }

  private async runVerify(): Promise<void> {
    const { ctx } = this;
    const saw = ctx.verified.oid !== null;
    const result = await ctx.driver.transaction(async (tx) => {
      const r = (await tx.query<IdentityRow>(ctx.q.identity))[0];
      if (r === undefined)
        throw new StoreUnavailableError(`${ctx.driver.where}: the epoch record is missing`);
      const oid = r.current.slice(r.current.lastIndexOf(':') + 1);
      const moved = saw && ctx.verified.oid !== oid;
      const atLeast = moved ? ctx.resets.highest : 0n;
      let floor = big(r.floor);
      let id = r.id;
      let why: string | null = null;
      if (r.recorded !== null && r.recorded !== r.current) {
        floor = maxBig(maxBig(floor, big(r.now) * 1000n), atLeast);
        why = `the store is not the one that verified the epoch last (${r.recorded} → ${r.current}): restored, recovered or failed over`;
        // Its in-flight entries are the backup's: one of a write finished since would hold
        // the drain barrier for as long as its (live) session lasts.
        await tx.query(ctx.q.inflight_forget);
      } else if (atLeast > floor) {
        floor = atLeast;
        why = 'this process saw tokens above the floor before the store changed';
      }
      if (why !== null) id = randomUUID();
      if (why !== null || r.recorded === null)
        await tx.query(ctx.q.epoch_set, [id, floor.toString(), r.current]);
      return { id, floor, oid, why };
    });
    ctx.verified.oid = result.oid;
    ctx.resets.epoch(result.id, result.floor, result.why ?? 'the epoch changed');
  }

  onReset(listener: (reset: StoreReset) => void): () => void {
    return this.ctx.resets.onReset(listener);
  }

  /** Runs `op`; when the store's tables changed under it (FGRST), verifies the store and runs it once more. */
  private async verified<T>(op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (err) {
      const cause = err instanceof StoreUnavailableError ? err.cause : err;
      if (errorCode(cause) !== IDENTITY_CHANGED) throw err;
      await this.verify();
      return op();
    }
  }

  // ---- locks ----

  async tryAcquire(req: AcquireRequest): Promise<AcquireResult> {
    const result = await this.verified(() => locks.tryAcquire(this.ctx, req));
    if (result.ok) this.ctx.resets.saw(result.lease.token);
    this.housekeep();
    return result;
  }

  async renew(key: string, leaseId: string, ttlMs: number): Promise<RenewResult> {
    const result = await this.verified(() => locks.renew(this.ctx, key, leaseId, ttlMs));
    if (result.ok) this.ctx.resets.saw(result.lease.token);
    return result;
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
    const result = await this.verified(() => this.batcher.admit(req));
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

  // ---- idempotency records ----

  beginIdempotent(req: IdempotentBegin): Promise<IdempotentBeginResult> {
    const r = idempotency.begin(this.ctx, req);
    this.housekeep();
    return r;
  }

  finishIdempotent(done: IdempotentFinish): Promise<boolean> {
    return idempotency.finish(this.ctx, done);
  }

  abandonIdempotent(key: string, attempt: string): Promise<void> {
    return idempotency.abandon(this.ctx, key, attempt);
  }

  openSession(id: string, ttlMs: number): Promise<void> {
    return fences.openSession(this.ctx, id, ttlMs);
  }

  async beatSession(id: string): Promise<BeatResult> {
    const beat = await fences.beatSession(this.ctx, id);
    // A failover or point-in-time recovery keeps the tables: seen here, within a few beats.
    if (performance.now() - this.lastVerify >= VERIFY_EVERY_MS) await this.verify();
    return beat;
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
    this.ctx.resets.epoch(r.id, big(r.floor), 'the epoch was bumped');
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
      if (Math.max(r.grants, r.waiters, r.inflight, r.idempotency) < PRUNE_BATCH) return;
    }
  }
}
