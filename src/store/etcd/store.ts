/**
 * The etcd store (`--store etcd://host:2379,…`): locks and fences on an etcd v3 cluster,
 * so an acknowledged grant or admission survives the loss of a minority of its members
 * (Raft). Every operation is one optimistic etcd transaction (txn.ts) running the
 * embedded store's record rules (src/store/lmdb/locks.ts, fences.ts) on the records it
 * read (snapshot.ts): compare on revisions, commit or run again. Tokens are a per-key
 * counter in the lock's record, raised in the grant's transaction (docs/adr/0020-etcd-store.md).
 * Watchers are woken by etcd watches (watch.ts); the epoch is tied to the cluster's
 * identity (identity.ts, epoch.ts).
 *
 * The store clock is this process's clock (etcd has none to ask): lease expiry is judged
 * with it, tokens never are. Design, promises and measurements: docs/stores-etcd.md.
 */
import { Etcd3, type IResponseHeader } from 'etcd3';
import { StoreUnavailableError } from '../../errors.js';
import type { FencingToken } from '../../tokens.js';
import type { Outcome } from '../lmdb/locks.js';
import * as fences from '../lmdb/fences.js';
import * as idempotency from '../lmdb/idempotency.js';
import * as locks from '../lmdb/locks.js';
import { storeFailure } from '../failure.js';
import { defaultNamespace, namespaceProblem } from '../namespace.js';
import { ResetWatch } from '../reset.js';
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
  InflightState,
  ListLocksQuery,
  LockPage,
  LockState,
  ReleaseResult,
  RenewResult,
  SessionRecord,
  Store,
  StoreHealth,
  StoreOptions,
  StoreReset,
} from '../types.js';
import { ETCD_FORMAT, initEpoch, raiseEpoch, readEpoch } from './epoch.js';
import { ClusterIdentity, IdentityChanged } from './identity.js';
import { recordKey, type RecordKey, type TableName } from './keys.js';
import { FIRST_RANGE, type RangeAsk, type Snapshot } from './snapshot.js';
import { parseEtcdSpec } from './spec.js';
import { EtcdHousekeeper } from './prune.js';
import { KeyQueue } from './serial.js';
import { TxnRunner } from './txn.js';
import { WakeWatch } from './watch.js';

export const DEFAULT_NAMESPACE = defaultNamespace('etcd');
/** How long one etcd call may take before the operation fails (no quorum: fail closed). */
const CALL_TIMEOUT_MS = 5000;
/**
 * A housekeeping round (prune.ts) starts at most this often per process, on a grant or an
 * admission: a round reads every record of four tables, which on etcd is a range read
 * per 500 records, not a local scan as on the embedded store (10 s there).
 */
const PRUNE_EVERY_MS = 60_000;

/** The store clock: this process's clock (see the file comment). */
const nowMs = (): number => Date.now();

/**
 * gRPC TLS credentials for etcds://: the server's certificate chains to --store-ca (or to
 * the built-in roots without it) and names the host dialled; --store-cert is presented
 * to a cluster that runs with --client-cert-auth.
 */
function credentials(opts: StoreOptions): {
  rootCertificate: Buffer;
  privateKey?: Buffer;
  certChain?: Buffer;
} {
  return {
    // null: gRPC's built-in roots (the option's type says Buffer; grpc.credentials.createSsl takes null).
    rootCertificate: (opts.tlsCa === undefined ? null : Buffer.from(opts.tlsCa.join('\n'))) as Buffer,
    ...(opts.tlsClient === undefined
      ? {}
      : { privateKey: Buffer.from(opts.tlsClient.key), certChain: Buffer.from(opts.tlsClient.cert) }),
  };
}

export class EtcdStore implements Store {
  readonly kind = 'etcd' as const;
  private readonly resets = new ResetWatch();
  private readonly identity = new ClusterIdentity();
  private readonly runner: TxnRunner;
  /** Runs the epoch raise itself: its answers verify the identity instead of checking it. */
  private readonly raiser: TxnRunner;
  private readonly wakes: WakeWatch;
  private readonly queue = new KeyQueue((ops) => this.guarded(() => this.runner.runGroup(ops)));
  private lastHeader: IResponseHeader | null = null;
  private closing: Promise<void> | null = null;
  private readonly housekeeper: EtcdHousekeeper;
  private pruning: Promise<void> | null = null;
  private lastPrune = 0;

  private constructor(
    private readonly client: Etcd3,
    private readonly ns: string,
    private readonly where: string,
  ) {
    this.runner = new TxnRunner(client.kv, ns, {
      sent: () => this.identity.floor(),
      check: (h, sentAt) => this.identity.check(h, sentAt),
    });
    this.raiser = new TxnRunner(client.kv, ns, { sent: () => 0n, check: (h) => (this.lastHeader = h) });
    this.wakes = new WakeWatch(client, ns, CALL_TIMEOUT_MS);
    this.housekeeper = new EtcdHousekeeper(client.kv, ns);
  }

  static async open(spec: string, opts: StoreOptions = {}): Promise<EtcdStore> {
    const ns = opts.namespace ?? DEFAULT_NAMESPACE;
    const bad = namespaceProblem(ns);
    if (bad !== null) throw new RangeError(bad);
    const parsed = parseEtcdSpec(spec);
    if (typeof parsed === 'string') throw new RangeError(parsed);
    const where = `${parsed.tls ? 'etcds' : 'etcd'} ${parsed.hosts.map((h) => new URL(h).host).join(',')}`;
    const client = new Etcd3({
      hosts: parsed.hosts,
      dialTimeout: CALL_TIMEOUT_MS,
      defaultCallOptions: () => ({ deadline: Date.now() + CALL_TIMEOUT_MS }),
      ...(parsed.auth === null ? {} : { auth: parsed.auth }),
      ...(parsed.tls ? { credentials: credentials(opts) } : {}),
    });
    const store = new EtcdStore(client, ns, where);
    try {
      await store.init(opts.mustExist === true);
    } catch (err) {
      await store.close().catch(() => undefined);
      throw storeFailure(err, `cannot open the etcd store (${where}, namespace "${ns}")`);
    }
    return store;
  }

  private key(table: TableName, key: RecordKey): string {
    return recordKey(this.ns, table, key);
  }

  private async init(mustExist: boolean): Promise<void> {
    const status = await this.client.maintenance.status({});
    const cluster = status.header.cluster_id;
    const found = await this.raiser.run([this.key('meta', 'format'), this.key('meta', 'epoch')], (snap) =>
      initEpoch(snap, nowMs(), cluster, mustExist),
    );
    if (found === null) throw new StoreUnavailableError(`namespace "${this.ns}" was never used by fencegate`);
    if (found !== ETCD_FORMAT) {
      throw new StoreUnavailableError(
        `namespace "${this.ns}" has format ${found}, this fencegate reads ${ETCD_FORMAT}`,
      );
    }
    if (this.lastHeader !== null) this.identity.verified(this.lastHeader);
    let last: Snapshot | null = null;
    await this.run([this.key('meta', 'epoch')], (snap) => {
      last = snap;
      return { result: undefined, notify: [] };
    });
    this.noteEpoch(last);
  }

  /**
   * One operation: the rule in an optimistic transaction. A changed identity seen on the
   * way raises the epoch first (above the clock × 1000 and every token this process saw),
   * then the operation runs again on the raised epoch. Failures of etcd (no quorum,
   * unreachable, timeout) are StoreUnavailableError: the caller fails closed.
   */
  private run<R>(
    keys: readonly string[],
    rule: (snap: Snapshot, now: number) => Outcome<R>,
    ranges: RangeAsk[] = [],
  ): Promise<R> {
    return this.guarded(() => this.runner.run(keys, (snap) => rule(snap, nowMs()), ranges));
  }

  /** The identity check and the mapping of etcd's failures around one transaction (run, or a group). */
  private async guarded<T>(txn: () => Promise<T>): Promise<T> {
    if (this.closing) throw new StoreUnavailableError(`${this.where}: store is closed`);
    for (;;) {
      try {
        if (this.identity.changed !== null) await this.raiseForIdentity(this.identity.changed);
        return await txn();
      } catch (err) {
        if (err instanceof IdentityChanged) continue;
        if (err instanceof RangeError) throw err;
        throw storeFailure(err, this.where);
      }
    }
  }

  /**
   * A write on one lock's (or session's) records: queued behind this process's others on
   * it, and sent with those queued beside it as one transaction (serial.ts).
   */
  private write<R>(
    on: string,
    keys: readonly string[],
    rule: (snap: Snapshot, now: number) => Outcome<R>,
  ): Promise<R> {
    return this.queue.run(on, { keys, rule: (snap) => rule(snap, nowMs()) });
  }

  private async raiseForIdentity(reason: string): Promise<void> {
    const epoch = await this.raiser.run([this.key('meta', 'epoch')], (snap) =>
      raiseEpoch(snap, nowMs(), this.lastHeader?.cluster_id ?? null, this.resets.highest),
    );
    if (this.lastHeader !== null) this.identity.verified(this.lastHeader);
    this.resets.epoch(epoch.id, BigInt(epoch.floor), reason);
  }

  /**
   * Notes the epoch an operation read (another one than this process knew is a reset), from
   * the snapshot of its last run: the one that committed, never a run on stale records.
   */
  private noteEpoch(snap: Snapshot | null): void {
    const e = snap === null ? undefined : readEpoch(snap);
    if (e !== undefined)
      this.resets.epoch(e.id, BigInt(e.floor), 'the epoch changed (bumped, or the store was restored)');
  }

  private lockKeys(key: string): string[] {
    return [
      this.key('meta', 'epoch'),
      // The retired floor a new lock record starts above (the rules read it; never set on etcd, which retires nothing).
      this.key('meta', 'retired'),
      this.key('locks', key),
      this.key('waiters', key),
      this.key('owners', key),
    ];
  }

  // ---- locks ----

  async tryAcquire(req: AcquireRequest): Promise<AcquireResult> {
    const keys = this.lockKeys(req.key);
    if (req.requestId !== undefined) keys.push(this.key('grants', [req.key, req.requestId, req.owner]));
    let last: Snapshot | null = null;
    const r = await this.write(`l:${req.key}`, keys, (snap, now) => {
      last = snap;
      return locks.tryAcquire(snap, req, now);
    });
    this.noteEpoch(last);
    if (r.ok) this.resets.saw(r.lease.token);
    this.housekeep();
    return r;
  }

  renew(key: string, leaseId: string, ttlMs: number): Promise<RenewResult> {
    return this.write(`l:${key}`, this.lockKeys(key), (snap, now) => ({
      result: locks.renew(snap, key, leaseId, ttlMs, now),
      notify: [],
    }));
  }

  release(key: string, leaseId: string): Promise<ReleaseResult> {
    return this.write(`l:${key}`, [this.key('locks', key)], (snap) => locks.release(snap, key, leaseId));
  }

  inspect(key: string): Promise<LockState | null> {
    return this.run(this.lockKeys(key), (snap, now) => ({
      result: locks.inspect(snap, key, now),
      notify: [],
    }));
  }

  enqueueWaiter(key: string, waiterId: string, waitMs: number): Promise<void> {
    return this.write(`l:${key}`, this.lockKeys(key), (snap, now) => ({
      result: locks.enqueueWaiter(snap, key, waiterId, waitMs, now),
      notify: [],
    }));
  }

  removeWaiter(key: string, waiterId: string): Promise<void> {
    return this.write(`l:${key}`, [this.key('waiters', key)], (snap) =>
      locks.removeWaiter(snap, key, waiterId),
    );
  }

  listLocks(query: ListLocksQuery): Promise<LockPage> {
    // The page's locks and the waiters beside them, read as two ranges from the first candidate.
    const from =
      query.after !== null && Buffer.compare(Buffer.from(query.after), Buffer.from(query.prefix)) > 0
        ? query.after
        : query.prefix;
    const ranges: RangeAsk[] = [
      {
        table: 'locks',
        start: this.key('locks', from),
        limit: Math.max(FIRST_RANGE, Math.min(query.limit, 1000) + 1),
      },
      { table: 'waiters', start: this.key('waiters', from), limit: 1000 },
    ];
    return this.run(
      [this.key('meta', 'epoch')],
      (snap, now) => ({ result: locks.listLocks(snap, query, now), notify: [] }),
      ranges,
    );
  }

  recentGrants(key: string): Promise<GrantRecord[]> {
    return this.run([this.key('owners', key)], (snap) => ({
      result: locks.recentGrants(snap, key),
      notify: [],
    }));
  }

  // ---- fences ----

  async admit(req: AdmitRequest): Promise<AdmitResult> {
    const keys = [this.key('meta', 'epoch'), this.key('locks', req.lock), this.key('inflight', req.lock)];
    let last: Snapshot | null = null;
    const r = await this.write(`l:${req.lock}`, keys, (snap, now) => {
      last = snap;
      const result = req.record === false ? fences.judgeOnly(snap, req, now) : fences.admit(snap, req, now);
      return { result, notify: [] };
    });
    this.noteEpoch(last);
    if (r.ok) this.resets.saw(r.highest);
    this.housekeep();
    return r;
  }

  finish(lock: string, requestId: string): Promise<void> {
    return this.write(`l:${lock}`, [this.key('inflight', lock)], (snap) =>
      fences.finish(snap, lock, requestId),
    );
  }

  deliver(lock: string, requestId: string, boundMs: number): Promise<boolean> {
    return this.write(`l:${lock}`, [this.key('inflight', lock)], (snap) =>
      fences.deliver(snap, lock, requestId, boundMs),
    );
  }

  lowerInflight(lock: string, token: FencingToken): Promise<InflightState> {
    return this.run([this.key('inflight', lock)], (snap) => ({
      result: fences.lowerInflight(snap, lock, token),
      notify: [],
    }));
  }

  dropInflight(lock: string, sessions: readonly string[], maxBoundMs: number): Promise<void> {
    if (sessions.length === 0) return Promise.resolve();
    return this.write(`l:${lock}`, [this.key('inflight', lock)], (snap) =>
      fences.dropInflight(snap, lock, sessions, maxBoundMs),
    );
  }

  // ---- idempotency records (the embedded store's rules, lmdb/idempotency.ts) ----

  beginIdempotent(req: IdempotentBegin): Promise<IdempotentBeginResult> {
    return this.write(`i:${req.key}`, [this.key('idempotency', req.key)], (snap, now) =>
      idempotency.begin(snap, req, now),
    );
  }

  finishIdempotent(done: IdempotentFinish): Promise<boolean> {
    return this.write(`i:${done.key}`, [this.key('idempotency', done.key)], (snap, now) =>
      idempotency.finish(snap, done, now),
    );
  }

  abandonIdempotent(key: string, attempt: string): Promise<void> {
    return this.write(`i:${key}`, [this.key('idempotency', key)], (snap) =>
      idempotency.abandon(snap, key, attempt),
    );
  }

  openSession(id: string, ttlMs: number): Promise<void> {
    fences.checkSessionId(id);
    return this.write(`s:${id}`, [this.key('sessions', id)], (snap, now) => ({
      result: fences.openSession(snap, id, ttlMs, now),
      notify: [],
    }));
  }

  beatSession(id: string): Promise<BeatResult> {
    return this.write(`s:${id}`, [this.key('sessions', id)], (snap, now) => ({
      result: fences.beatSession(snap, id, now),
      notify: [],
    }));
  }

  readSessions(ids: readonly string[] | null): Promise<Map<string, SessionRecord>> {
    const keys = (ids ?? []).map((id) => this.key('sessions', id));
    return this.run(keys, (snap) => ({ result: fences.readSessions(snap, ids), notify: [] }));
  }

  endSession(id: string, ifBeat: number | null): Promise<boolean> {
    return this.write(`s:${id}`, [this.key('sessions', id)], (snap) => fences.endSession(snap, id, ifBeat));
  }

  // ---- notifications ----

  async watch(key: string, listener: () => void): Promise<() => void> {
    if (this.closing) throw new StoreUnavailableError(`${this.where}: store is closed`);
    try {
      return await this.wakes.watch(key, listener);
    } catch (err) {
      throw storeFailure(err, `${this.where}: cannot watch`);
    }
  }

  // ---- epochs ----

  async bumpEpoch(): Promise<{ id: string; floor: FencingToken }> {
    const e = await this.run([this.key('meta', 'epoch')], (snap, now) =>
      raiseEpoch(snap, now, this.identity.cluster),
    );
    const floor = BigInt(e.floor);
    this.resets.epoch(e.id, floor, 'the epoch was bumped');
    return { id: e.id, floor };
  }

  onReset(listener: (reset: StoreReset) => void): () => void {
    return this.resets.onReset(listener);
  }

  // ---- lifecycle ----

  now(): Promise<number> {
    return Promise.resolve(nowMs());
  }

  async health(): Promise<StoreHealth> {
    try {
      // A linearizable read: it needs a quorum, as every grant and admission does.
      const e = await this.run([this.key('meta', 'epoch')], (snap) => ({
        result: readEpoch(snap),
        notify: [],
      }));
      const s = await this.client.maintenance.status({});
      return {
        ok: true,
        kind: this.kind,
        detail:
          `${this.where} (cluster ${s.header.cluster_id}, leader ${s.leader}, raft term ${s.raftTerm}, ` +
          `members answered ${[...this.identity.members].join(',')}, etcd ${s.version}), namespace "${this.ns}"`,
        epoch: e === undefined ? null : { id: e.id, floor: BigInt(e.floor) },
      };
    } catch (err) {
      return {
        ok: false,
        kind: this.kind,
        detail: err instanceof Error ? err.message : String(err),
        epoch: null,
      };
    }
  }

  /** Removes expired records in the background (prune.ts), a round at most every PRUNE_EVERY_MS. */
  private housekeep(): void {
    if (this.closing || this.pruning) return;
    const t = Date.now();
    if (t - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = t;
    this.pruning = this.housekeeper
      .round(nowMs, () => this.closing !== null)
      // Best effort: etcd unreachable now fails the operations themselves; the next round retries.
      .then(
        () => undefined,
        () => undefined,
      )
      .finally(() => {
        this.pruning = null;
      });
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.pruning) await this.pruning;
      await this.wakes.close();
      this.client.close();
    })();
    return this.closing;
  }
}

export function openEtcdStore(spec: string, opts: StoreOptions = {}): Promise<Store> {
  return EtcdStore.open(spec, opts);
}
