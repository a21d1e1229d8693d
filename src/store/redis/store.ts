/**
 * The Redis backend of Store. Every state change is one Lua script (./scripts/), atomic
 * on the lock's keys, which share one hash tag (./keys.ts). Tokens travel as decimal
 * strings end to end (docs/adr/0001-tokens-as-strings-in-lua.md); times come from the
 * Redis clock inside the scripts. See docs/stores-redis.md.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { formatToken, parseToken, type FencingToken } from '../../tokens.js';
import {
  deliveryBound as bound,
  GRANT_HISTORY,
  type GrantRecord,
  type ListLocksQuery,
  type LockPage,
} from '../types.js';
import type {
  AcquireRequest,
  AcquireResult,
  AdmitRequest,
  AdmitResult,
  BeatResult,
  IdempotentBegin,
  IdempotentBeginResult,
  IdempotentFinish,
  InflightState,
  LockState,
  ReleaseResult,
  RenewResult,
  SessionRecord,
  Store,
  StoreHealth,
  StoreOptions,
  StoreReset,
} from '../types.js';
import { StoreUnavailableError } from '../../errors.js';
import { defaultNamespace, namespaceProblem } from '../namespace.js';
import {
  type Connection,
  type ServerConnection,
  clusterConnection,
  connect,
  createConnection,
  unavailable,
} from './connection.js';
import { ClusterTopology, keySlot, parseClusterSpec, redactClusterSpec } from './cluster.js';
import { verifyCluster, type ClusterVerified } from './cluster-verify.js';
import { type Durability, checkDurability, infoField, RedisDurabilityError } from './durability.js';
import {
  channelOfInflight,
  decodeOwnerLine,
  encodeOwnerLine,
  epochKey,
  idempotencyKey,
  inflightPattern,
  lockKeyOf,
  lockKeys,
  scanPatterns,
  sessionsKey,
  type LockKeys,
} from './keys.js';
import {
  parseAcquire,
  parseBeat,
  parseEpoch,
  parseEpochVerify,
  parseIdempotentBegin,
  parseInflight,
  parseInspect,
  parseRenew,
  parseSessionRecord,
} from './replies.js';
import { defineScripts, type FencegateRedis } from './scripts.js';
import { Watcher } from './watch.js';
import { FenceBatcher, type BatchedAdmit } from './fence-batch.js';
import { ResetWatch } from '../reset.js';

/** Idempotency records live at least this long (and at least the lease TTL). */
export const MIN_IDEMPOTENCY_MS = 10 * 60 * 1000;
/** listLocks examines at most this many SCAN pages per pattern (COUNT SCAN_COUNT each). */
const MAX_SCAN_PAGES = 200;
const SCAN_COUNT = 500;

type Epoch = { id: string; floor: FencingToken };

/** How many locks' key names are kept built (see RedisStore.keys). */
const KEY_NAMES_CACHED = 10_000;

/** A connection whose verification failed is verified again at most this often (ms). */
const VERIFY_RETRY_MS = 1000;

/** A positive integer number of milliseconds, as a string for ARGV. */
function ms(name: string, value: number): string {
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} must be a positive number`);
  return String(Math.ceil(value));
}

class RedisStore implements Store {
  readonly kind = 'redis' as const;
  private readonly watcher: Watcher;
  private readonly epochKey: string;
  private readonly sessionsKey: string;
  private closed = false;
  private readonly resets = new ResetWatch();
  /**
   * The server this process verified last (its run_id), and whether the current
   * connection was verified (verify(): durability and identity, ADR 0019). Every
   * reconnection clears `verified`: nothing is granted or admitted on a new connection
   * before it is verified again.
   */
  private serverId: string | null = null;
  private verified = false;
  private verifying: Promise<void> | null = null;
  /** Why the last verification failed (the store fails closed meanwhile), and when. */
  private failure: { error: StoreUnavailableError; at: number } | null = null;

  constructor(
    private readonly conn: Connection,
    private readonly redis: FencegateRedis,
    private readonly prefix: string,
    private durability: Durability,
    private readonly allowVolatile: boolean,
  ) {
    this.watcher = new Watcher(conn);
    this.epochKey = epochKey(prefix);
    this.sessionsKey = sessionsKey(prefix);
    const topology = conn.topology;
    this.fence = new FenceBatcher(
      redis,
      this.epochKey,
      async () => formatToken((await this.currentEpoch()).floor),
      topology === null ? null : (k) => keySlot(k.inf),
    );
    const lost = (): void => {
      this.verified = false;
    };
    // A cluster: a verified node's connection lost, or the primaries changed (cluster.ts).
    if (topology !== null) topology.onChange(lost);
    else conn.client.on('close', lost);
  }

  /**
   * Checks, on a new connection, that it still reaches a durable Redis that holds the
   * state this process knew (docs/adr/0019-store-identity.md): the durability check
   * again, then the epoch record tied to the server's run_id (fg_epoch_verify_v1). A
   * server other than the one that verified the record last starts a new epoch above
   * the clock (and above every token this process saw, if this process saw the change);
   * a process that sees it emits a reset. While the check fails the store fails closed.
   */
  private ensureVerified(): Promise<void> {
    if (this.verified) return Promise.resolve();
    const failed = this.failure;
    // A failed check is tried again at most once a second; until then the store stays closed.
    if (failed !== null && performance.now() - failed.at < VERIFY_RETRY_MS)
      return Promise.reject(failed.error);
    this.verifying ??= this.verify().finally(() => {
      this.verifying = null;
    });
    return this.verifying;
  }

  private async verify(): Promise<void> {
    try {
      if (this.conn.topology !== null) {
        await this.verifyCluster(this.conn.topology);
        return;
      }
      await this.verifyServer(this.conn as ServerConnection);
    } catch (err) {
      const error = unavailable(this.conn, 'verify', err);
      this.failure = { error, at: performance.now() };
      throw error;
    }
  }

  /**
   * After a promoted replica answered (on a cluster: a primary promoted or emptied): the
   * in-flight entries at or below the new floor are the replica's copy and are forgotten
   * (fg_inflight_forget_v1 says why), lock by lock, on every primary. New admissions are
   * above the floor, so other processes admitting meanwhile lose nothing. As the Postgres
   * store does after a restore (inflight_forget in queries.sql).
   */
  private async forgetInflight(floor: FencingToken): Promise<void> {
    const pattern = inflightPattern(this.prefix);
    const servers: Redis[] = this.conn.topology?.primaries() ?? [this.conn.client as Redis];
    for (const server of servers) {
      let cursor = '0';
      do {
        const [next, found] = await server.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT);
        for (const inf of found)
          await this.redis.fg_inflight_forget_v1(inf, channelOfInflight(inf), formatToken(floor));
        cursor = next;
      } while (cursor !== '0');
    }
  }

  /**
   * The primaries (node id -> run_id) this process verified last on a cluster: when one of
   * them is replaced by a promoted replica, the new epoch is at least the highest token
   * this process saw (as on one server, ADR 0019).
   */
  private clusterServers: Map<string, string> | null = null;

  private async verifyCluster(topology: ClusterTopology): Promise<void> {
    const known = this.clusterServers;
    const v: ClusterVerified = await verifyCluster(
      topology,
      this.prefix,
      this.epochKey,
      randomUUID(),
      this.allowVolatile,
      (checks) => {
        const replaced = checks.some((c) => c.promoted && known !== null && known.get(c.nodeId) !== c.runId);
        return replaced && this.resets.highest > 0n ? formatToken(this.resets.highest) : '';
      },
    );
    this.durability = v.durability;
    if (v.outcome === 'bumped') await this.forgetInflight(v.floor);
    this.fence.floorChanged();
    this.clusterServers = v.servers;
    this.verified = true;
    this.failure = null;
    const why =
      v.outcome === 'created'
        ? 'the epoch record was missing (the store lost its state)'
        : v.outcome === 'bumped'
          ? `a Redis Cluster primary was promoted from a replica or lost its data (promoted: ` +
            `${v.promoted.join(', ') || 'none'}): its data may be older than what was acknowledged`
          : 'this process saw tokens above the floor';
    this.resets.epoch(v.id, v.floor, why);
  }

  private async verifyServer(conn: ServerConnection): Promise<void> {
    try {
      this.durability = await checkDurability(conn, this.allowVolatile);
    } catch (err) {
      if (!(err instanceof RedisDurabilityError)) throw err;
      throw new StoreUnavailableError(`redis store unavailable: ${err.message}`, { cause: err });
    }
    const runId = infoField(await this.redis.info('server'), 'run_id');
    if (runId === null) throw new Error('INFO server has no run_id');
    const replication = await this.redis.info('replication');
    const role = infoField(replication, 'role');
    if (role !== 'master') {
      throw new StoreUnavailableError(
        `redis store unavailable: ${this.conn.where} is a ${role ?? 'server of unknown role'}, not a primary`,
      );
    }
    // A master that took over from another one (a promoted replica) keeps that one's id here.
    const replid2 = infoField(replication, 'master_replid2');
    const promoted = replid2 !== null && !/^0+$/.test(replid2);
    const moved = this.serverId !== null && this.serverId !== runId;
    const atLeast = moved && promoted && this.resets.highest > 0n ? formatToken(this.resets.highest) : '';
    const reply = await this.redis.fg_epoch_verify_v1(
      this.epochKey,
      randomUUID(),
      runId,
      atLeast,
      promoted ? '1' : '0',
    );
    const { id, floor, outcome } = parseEpochVerify(reply);
    if (outcome === 'bumped') await this.forgetInflight(floor);
    this.fence.floorChanged();
    const was = this.serverId;
    this.serverId = runId;
    this.verified = true;
    this.failure = null;
    const why =
      outcome === 'created'
        ? 'the epoch record was missing (the store lost its state)'
        : outcome === 'bumped'
          ? `a promoted Redis server answers (run_id ${runId}, was ${was ?? 'unknown to this process'}): ` +
            'replication is asynchronous, its data may be older than what was acknowledged'
          : 'this process saw tokens above the floor';
    this.resets.epoch(id, floor, why);
  }

  /** The first verification (durability, identity), whose findings are only remembered. */
  async open(): Promise<void> {
    await this.ensureVerified();
  }

  onReset(listener: (reset: StoreReset) => void): () => void {
    return this.resets.onReset(listener);
  }

  /** Admissions and finishes, one script call per turn of the event loop (fence-batch.ts). */
  private readonly fence: FenceBatcher;

  /**
   * The key names of recently used locks: a fenced write needs them twice (admit, finish),
   * and building them is eight strings and an object each time (~3 KB of garbage per write,
   * sampled). Bounded; the oldest entry is dropped first.
   */
  private readonly keyNames = new Map<string, LockKeys>();

  private keys(key: string): LockKeys {
    let k = this.keyNames.get(key);
    if (k === undefined) {
      k = lockKeys(this.prefix, key);
      if (this.keyNames.size >= KEY_NAMES_CACHED) {
        const oldest = this.keyNames.keys().next();
        if (oldest.done !== true) this.keyNames.delete(oldest.value);
      }
      this.keyNames.set(key, k);
    }
    return k;
  }

  /**
   * Runs a store call on a verified connection. Every call waits for the verification, not
   * only grants and admissions: a call acknowledged by a server that is not durable or not
   * the one verified (a finish, a beat) could be lost when the right data comes back, and
   * an entry it removed would count again.
   */
  private async run<T>(op: string, fn: () => Promise<T>): Promise<T> {
    try {
      if (!this.verified) await this.ensureVerified();
      return await fn();
    } catch (err) {
      throw unavailable(this.conn, op, err);
    }
  }

  /** The global epoch; recreated (new floor from the clock) if Redis lost it. */
  async currentEpoch(): Promise<Epoch> {
    const [id, floor] = await this.redis.hmget(this.epochKey, 'id', 'floor');
    if (id && floor) {
      const p = parseToken(floor);
      if (p.ok) {
        this.resets.epoch(
          id,
          p.token,
          'the epoch changed (bumped, or the store was restored or lost its state)',
        );
        return { id, floor: p.token };
      }
    }
    const made = parseEpoch(
      await this.redis.fg_epoch_init_v1(this.epochKey, randomUUID()),
      'fg_epoch_init_v1',
    );
    this.resets.epoch(made.id, made.floor, 'the epoch record was missing (the store lost its state)');
    return made;
  }

  async tryAcquire(req: AcquireRequest): Promise<AcquireResult> {
    const ttl = ms('ttlMs', req.ttlMs);
    const k = this.keys(req.key);
    const withReq = req.requestId !== undefined;
    const reqKey = k.req(req.owner, req.requestId ?? '');
    const reqTtl = withReq ? String(Math.max(Number(ttl), MIN_IDEMPOTENCY_MS)) : '';
    const result = await this.run('acquire', async () => {
      const epoch = await this.currentEpoch();
      const reply = await this.redis.fg_acquire_v4(
        k.ctr,
        k.lease,
        k.waitq,
        k.waitdl,
        reqKey,
        formatToken(epoch.floor),
        req.leaseId ?? randomUUID(),
        req.owner,
        ttl,
        req.waiterId ?? '',
        reqTtl,
        k.channel,
        String(GRANT_HISTORY),
        encodeOwnerLine(req.owner),
      );
      return parseAcquire(reply, req.key);
    });
    if (result === 'exhausted') return { ok: false, reason: 'exhausted' };
    if (result.ok) this.resets.saw(result.lease.token);
    return result;
  }

  async renew(key: string, leaseId: string, ttlMs: number): Promise<RenewResult> {
    const ttl = ms('ttlMs', ttlMs);
    return this.run('renew', async () => {
      const floor = formatToken((await this.currentEpoch()).floor);
      return parseRenew(
        await this.redis.fg_renew_v2(this.keys(key).lease, leaseId, ttl, floor),
        key,
        leaseId,
      );
    });
  }

  async release(key: string, leaseId: string): Promise<ReleaseResult> {
    const k = this.keys(key);
    const reply = await this.run('release', () => this.redis.fg_release_v1(k.lease, leaseId, k.channel));
    return reply === 'ok' ? { ok: true } : { ok: false, reason: 'not-owner' };
  }

  async inspect(key: string): Promise<LockState | null> {
    const k = this.keys(key);
    return this.run('inspect', async () => {
      const floor = formatToken((await this.currentEpoch()).floor);
      return parseInspect(
        await this.redis.fg_inspect_v3(k.ctr, k.lease, k.waitq, k.waitdl, k.fence, floor),
        key,
      );
    });
  }

  async enqueueWaiter(key: string, waiterId: string, waitMs: number): Promise<void> {
    const k = this.keys(key);
    const wait = ms('waitMs', waitMs);
    await this.run('enqueueWaiter', () => this.redis.fg_enqueue_waiter_v1(k.waitq, k.waitdl, waiterId, wait));
  }

  async removeWaiter(key: string, waiterId: string): Promise<void> {
    const k = this.keys(key);
    await this.run('removeWaiter', () =>
      this.redis.fg_remove_waiter_v1(k.waitq, k.waitdl, waiterId, k.channel),
    );
  }

  /**
   * SCANs `<prefix>:{<keyPrefix>*}:lease` and `:waitq` (at most MAX_SCAN_PAGES pages
   * each, so the cost is bounded on a large Redis), then inspects the candidates after
   * `after` in byte order until `limit` (+1, to know whether a next page exists) locks
   * with a live lease or live waiters are found. SCAN has no order, so every page scans
   * again: paging is for the dashboard's lock table, not for bulk export.
   */
  async listLocks(query: ListLocksQuery): Promise<LockPage> {
    const limit = Math.min(Math.max(0, Math.trunc(query.limit)), 1000);
    return this.run('listLocks', async () => {
      const now = await this.now();
      if (limit === 0) return { locks: [], next: null, now };
      const candidates = new Set<string>();
      // On a cluster every primary holds a share of the keys: each is scanned.
      const servers = this.conn.topology?.primaries() ?? [this.conn.client as Redis];
      for (const server of servers) {
        for (const pattern of scanPatterns(this.prefix, query.prefix)) {
          let cursor = '0';
          let pages = 0;
          do {
            const [next, found] = await server.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT);
            for (const redisKey of found) {
              const lock = lockKeyOf(this.prefix, redisKey);
              if (lock !== null && lock.startsWith(query.prefix)) candidates.add(lock);
            }
            cursor = next;
            pages += 1;
          } while (cursor !== '0' && pages < MAX_SCAN_PAGES);
        }
      }
      const after = query.after === null ? null : Buffer.from(query.after);
      const sorted = [...candidates]
        .map((key) => ({ key, bytes: Buffer.from(key) }))
        .filter((c) => after === null || Buffer.compare(c.bytes, after) > 0)
        .sort((a, b) => Buffer.compare(a.bytes, b.bytes))
        .map((c) => c.key);
      const found: LockState[] = [];
      const batch = 50;
      for (let i = 0; i < sorted.length && found.length <= limit; i += batch) {
        const states = await Promise.all(sorted.slice(i, i + batch).map((key) => this.inspect(key)));
        for (const s of states) {
          if (s !== null && (s.held || s.waiters > 0) && found.length <= limit) found.push(s);
        }
      }
      const locks = found.slice(0, limit);
      const last = locks[locks.length - 1];
      return { locks, next: found.length > limit && last !== undefined ? last.key : null, now };
    });
  }

  /** The `owners` field of the key's ctr hash (written by every grant, GRANT_HISTORY lines). */
  async recentGrants(key: string): Promise<GrantRecord[]> {
    const k = this.keys(key);
    const field = await this.run('recentGrants', () => this.redis.hget(k.ctr, 'owners'));
    const out: GrantRecord[] = [];
    for (const line of (field ?? '').split('\n')) {
      const space = line.indexOf(' ');
      const p = parseToken(line.slice(0, Math.max(0, space)));
      if (space > 0 && p.ok) out.push({ token: p.token, owner: decodeOwnerLine(line.slice(space + 1)) });
    }
    return out.slice(0, GRANT_HISTORY);
  }

  /**
   * Admission, batched with the other admissions and finishes of this turn of the event
   * loop (fence-batch.ts, which also explains how the global epoch floor is checked
   * without a read before every batch). When the floor changed under the batch, the
   * admission is undone (its in-flight entry finished; a fence it raised stays below the
   * new floor, so it admits nothing lower) and redone with the floor read first. A floor
   * that could not be re-read fails the admission (fail closed), and its entry is finished.
   */
  admit(req: AdmitRequest): Promise<AdmitResult> {
    if (!this.verified) {
      return this.ensureVerified().then(
        () => this.admit(req),
        (err: unknown) => {
          throw unavailable(this.conn, 'admit', err);
        },
      );
    }
    const k = this.keys(req.lock);
    const token = formatToken(req.token);
    // Without the async frames of run() on the path every fenced write takes.
    return this.fence.admit(k, token, req.check, req.requestId, req.session, req.record, bound(req)).then(
      (first) =>
        first.current === true ? this.admitted(first.result) : this.admitAgain(k, token, req, first),
      (err: unknown) => {
        throw unavailable(this.conn, 'admit', err);
      },
    );
  }

  /** An admission's answer, whose highest this process has now seen. */
  private admitted(result: AdmitResult): AdmitResult {
    if (result.ok) this.resets.saw(result.highest);
    return result;
  }

  /** The floor changed under the admission's batch (or could not be re-read): undo, and redo or fail. */
  private admitAgain(
    k: LockKeys,
    token: string,
    req: AdmitRequest,
    first: BatchedAdmit,
  ): Promise<AdmitResult> {
    return this.run('admit', async () => {
      let { result, current } = first;
      while (current !== true) {
        const undo = result.ok && req.record === true;
        if (current instanceof Error) {
          if (undo) await this.fence.finish(k, req.requestId).catch(() => undefined); // else: its session's end drops it
          throw current;
        }
        if (undo) await this.fence.finish(k, req.requestId);
        ({ result, current } = await this.fence.admit(
          k,
          token,
          req.check,
          req.requestId,
          req.session,
          req.record,
          bound(req),
        ));
      }
      return this.admitted(result);
    });
  }

  /** Every fenced write's last call: without the async frames of run() (two promises fewer). */
  finish(lock: string, requestId: string): Promise<void> {
    if (!this.verified) {
      return this.ensureVerified().then(
        () => this.finish(lock, requestId),
        (err: unknown) => {
          throw unavailable(this.conn, 'finish', err);
        },
      );
    }
    return this.fence.finish(this.keys(lock), requestId).then(
      () => undefined,
      (err: unknown) => {
        throw unavailable(this.conn, 'finish', err);
      },
    );
  }

  async deliver(lock: string, requestId: string, boundMs: number): Promise<boolean> {
    const k = this.keys(lock);
    const b = String(ms('boundMs', boundMs));
    return this.run('deliver', async () => {
      return (await this.redis.fg_deliver_v1(k.inf, requestId, b)) === '1';
    });
  }

  async lowerInflight(lock: string, token: FencingToken): Promise<InflightState> {
    const k = this.keys(lock);
    const t = formatToken(token);
    return this.run('lowerInflight', async () =>
      parseInflight(await this.redis.fg_lower_inflight_v3(k.inf, t)),
    );
  }

  async dropInflight(lock: string, sessions: readonly string[], maxBoundMs: number): Promise<void> {
    if (sessions.length === 0) return;
    const k = this.keys(lock);
    const b = String(Math.max(0, Math.floor(maxBoundMs)));
    await this.run('dropInflight', () => this.redis.fg_drop_inflight_v2(k.inf, k.channel, b, ...sessions));
  }

  // ---- idempotency records (one key each: scripts idem_*.lua) ----

  async beginIdempotent(req: IdempotentBegin): Promise<IdempotentBeginResult> {
    const hold = ms('holdMs', req.holdMs);
    const key = idempotencyKey(this.prefix, req.key);
    return this.run('beginIdempotent', async () =>
      parseIdempotentBegin(await this.redis.fg_idem_begin_v1(key, req.fingerprint, req.attempt, hold)),
    );
  }

  async finishIdempotent({ key, attempt, response, ttlMs }: IdempotentFinish): Promise<boolean> {
    const ttl = ms('ttlMs', ttlMs);
    const body = Buffer.from(response.buffer, response.byteOffset, response.byteLength).toString('base64');
    const record = idempotencyKey(this.prefix, key);
    return this.run('finishIdempotent', async () => {
      return (await this.redis.fg_idem_finish_v1(record, attempt, body, ttl)) === '1';
    });
  }

  async abandonIdempotent(key: string, attempt: string): Promise<void> {
    const record = idempotencyKey(this.prefix, key);
    await this.run('abandonIdempotent', () => this.redis.fg_idem_abandon_v1(record, attempt));
  }

  async openSession(id: string, ttlMs: number): Promise<void> {
    const ttl = ms('ttlMs', ttlMs);
    await this.run('openSession', () => this.redis.fg_session_open_v1(this.sessionsKey, id, ttl));
  }

  async beatSession(id: string): Promise<BeatResult> {
    return this.run('beatSession', async () =>
      parseBeat(await this.redis.fg_session_beat_v1(this.sessionsKey, id)),
    );
  }

  async readSessions(ids: readonly string[] | null): Promise<Map<string, SessionRecord>> {
    return this.run('readSessions', async () => {
      const out = new Map<string, SessionRecord>();
      if (ids === null) {
        const all = await this.redis.hgetall(this.sessionsKey);
        for (const [id, value] of Object.entries(all)) {
          const r = parseSessionRecord(value);
          if (r !== null) out.set(id, r);
        }
      } else if (ids.length > 0) {
        const values = await this.redis.hmget(this.sessionsKey, ...ids);
        ids.forEach((id, i) => {
          const value = values[i];
          const r = value == null ? null : parseSessionRecord(value);
          if (r !== null) out.set(id, r);
        });
      }
      return out;
    });
  }

  async endSession(id: string, ifBeat: number | null): Promise<boolean> {
    const expected = ifBeat === null ? '' : String(ifBeat);
    return this.run(
      'endSession',
      async () => (await this.redis.fg_session_end_v1(this.sessionsKey, id, expected)) === '1',
    );
  }

  async watch(key: string, listener: () => void): Promise<() => void> {
    return this.watcher.watch(this.keys(key).channel, listener);
  }

  async bumpEpoch(): Promise<Epoch> {
    this.fence.floorChanged();
    return this.run('bumpEpoch', async () => {
      const e = parseEpoch(
        await this.redis.fg_epoch_bump_v1(this.epochKey, randomUUID()),
        'fg_epoch_bump_v1',
      );
      this.resets.epoch(e.id, e.floor, 'the epoch was bumped');
      return e;
    });
  }

  async now(): Promise<number> {
    return this.run('now', async () => {
      const [sec, usec] = await this.redis.time();
      return Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
    });
  }

  async health(): Promise<StoreHealth> {
    try {
      // Not ready on a connection that is not verified (a reconnection is verified here too).
      await this.ensureVerified();
      const [id, floor] = await this.redis.hmget(this.epochKey, 'id', 'floor');
      const p = floor == null ? null : parseToken(floor);
      const epoch = id != null && p !== null && p.ok ? { id, floor: p.token } : null;
      return { ok: true, kind: 'redis', detail: `${this.conn.where}; ${this.durability.detail}`, epoch };
    } catch (err) {
      return { ok: false, kind: 'redis', detail: unavailable(this.conn, 'health', err).message, epoch: null };
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.fence.flushNow(); // finishes still lingering go out before QUIT
    await this.watcher.close();
    try {
      await this.conn.client.quit();
    } catch {
      this.conn.client.disconnect();
    }
  }
}

/**
 * Opens the Redis store at `url` (redis:// or rediss://, or redis+cluster://host:port,… for
 * a Redis Cluster: cluster.ts). Rejects with a one-line StoreUnavailableError within a few
 * seconds when Redis cannot be reached, and with RedisDurabilityError when Redis (on a
 * cluster: any primary) lacks AOF `appendfsync always` (unless opts.allowVolatileRedis).
 * Creates the global epoch record when it is missing.
 */
export async function openRedisStore(url: string, opts: StoreOptions = {}): Promise<Store> {
  const prefix = opts.namespace ?? defaultNamespace('redis');
  const bad = namespaceProblem(prefix);
  if (bad !== null) throw new RangeError(bad);
  const cluster = /^rediss?\+cluster:\/\//i.test(url);
  const conn = cluster ? openCluster(url, opts) : openServer(url, opts);
  await connect(conn);
  try {
    const allowVolatile = opts.allowVolatileRedis === true;
    // One server: its durability first (a clear RedisDurabilityError); a cluster's primaries are checked by verify().
    const durability =
      conn.topology === null
        ? await checkDurability(conn as ServerConnection, allowVolatile)
        : { durable: false, detail: 'not verified yet' };
    const store = new RedisStore(conn, defineScripts(conn.client), prefix, durability, allowVolatile);
    if (opts.mustExist === true && !(await epochExists(conn, epochKey(prefix)))) {
      throw new StoreUnavailableError(
        `redis at ${conn.where} holds no fencegate store with prefix "${prefix}"`,
      );
    }
    await store.open().catch((err: unknown) => rethrowDurability(err));
    return store;
  } catch (err) {
    conn.client.disconnect();
    throw err;
  }
}

/**
 * rediss:// (and rediss+cluster://): verified against --store-ca instead of the built-in
 * roots, presenting --store-cert when given (ioredis turns tls on for rediss).
 */
function tlsOptions(opts: StoreOptions): { tls?: { ca?: string[]; cert?: string; key?: string } } {
  if (opts.tlsCa === undefined && opts.tlsClient === undefined) return {};
  return {
    tls: {
      ...(opts.tlsCa === undefined ? {} : { ca: [...opts.tlsCa] }),
      ...(opts.tlsClient === undefined ? {} : opts.tlsClient),
    },
  };
}

function openServer(url: string, opts: StoreOptions): Connection {
  return createConnection(url, { connectionName: 'fencegate', ...tlsOptions(opts) });
}

function openCluster(url: string, opts: StoreOptions): Connection {
  const spec = parseClusterSpec(url);
  if (typeof spec === 'string') throw new RangeError(`"${redactClusterSpec(url)}": ${spec}`);
  const topology = new ClusterTopology(spec, {
    redisOptions: { connectionName: 'fencegate', ...(spec.tls ? tlsOptions(opts) : {}) },
  });
  return clusterConnection(topology, redactClusterSpec(url));
}

/** Whether the epoch record exists (on a cluster, asked before any primary is verified). */
async function epochExists(conn: Connection, key: string): Promise<boolean> {
  const topology = conn.topology;
  if (topology === null) return (await conn.client.exists(key)) > 0;
  await topology.refresh();
  const owner = topology.ownerOf(keySlot(key));
  if (owner === undefined)
    throw new StoreUnavailableError(`redis at ${conn.where}: no primary serves ${key}`);
  return Number(await topology.raw(owner, 'exists', [key])) > 0;
}

/** At open, a primary that is not durable is reported as RedisDurabilityError, as for one server. */
function rethrowDurability(err: unknown): never {
  let cause: unknown = err;
  while (cause instanceof Error) {
    if (cause instanceof RedisDurabilityError) throw cause;
    cause = cause.cause;
  }
  throw err;
}
