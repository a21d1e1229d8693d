/**
 * The embedded store (the default): LMDB in a local directory, shared by every
 * fencegate process on the machine that opens the same directory (`--workers N`).
 * Each operation that decides on a key's state is one LMDB write transaction;
 * transactions issued in the same event-loop turn commit together (group commit,
 * one fdatasync pair for all of them) on LMDB's write thread, so the event loop never
 * waits for the disk. Watchers are woken across processes by wakeup.ts. A disk that
 * refuses commits (full, read-only: disk.ts) fails the writes, never the process, and
 * /readyz says so until a commit succeeds again.
 * Design and measurements: docs/adr/0009-embedded-store.md, docs/stores-embedded.md.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { StoreUnavailableError } from '../../errors.js';
import { storeFailure } from '../failure.js';
import { defaultNamespace, namespaceProblem } from '../namespace.js';
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
import { ResetWatch } from '../reset.js';
import {
  DATA_FILE,
  FORMAT_VERSION,
  nowMs,
  openTables,
  UPGRADABLE_FORMATS,
  type EpochRec,
  type Tables,
} from './db.js';
import { commitCause, diskFault, guardCommitRejections } from './disk.js';
import * as fences from './fences.js';
import * as idempotency from './idempotency.js';
import * as locks from './locks.js';
import { migrateToCompact } from './migrate.js';
import { housekeep } from './prune.js';
import { DEFAULT_LOCK_RETENTION_MS } from './retire.js';
import { WakeMesh, type Peer, type PeerRegistry } from './wakeup.js';

export const DEFAULT_NAMESPACE = defaultNamespace('embedded');
/** Where the PGlite embedded store of fencegate 0.1 kept its data: refused, see legacyRefusal. */
const PGLITE_DATA_DIR = 'pgdata';
/** Housekeeping starts at most this often per process. */
const PRUNE_EVERY_MS = 10_000;
/** While the disk refuses writes, /readyz tries a one-record write at most this often. */
const DISK_PROBE_EVERY_MS = 1000;

type Listener = () => void;

function legacyRefusal(root: string): StoreUnavailableError {
  return new StoreUnavailableError(
    `${root} holds a PGlite embedded store from an older fencegate (${join(root, PGLITE_DATA_DIR)}), which this ` +
      `version cannot read: move it aside and start on an empty directory (new tokens start above every old one; ` +
      `see docs/stores-embedded.md, "Upgrading from the PGlite store")`,
  );
}

/** A file's identity: device and inode (a copy or a restore makes a new one). */
function fileIdentity(path: string): string {
  const s = statSync(path);
  return `${s.dev}:${s.ino}`;
}

export class LmdbStore implements Store {
  readonly kind = 'embedded' as const;
  private readonly listeners = new Map<string, Set<{ fn: Listener }>>();
  private readonly resets = new ResetWatch();
  /** The data file this process opened (fileIdentity), checked before every operation. */
  private identity = '';
  /** Set once the data file at the path is no longer the one this process opened. */
  private replaced: StoreUnavailableError | null = null;
  private mesh: WakeMesh | null = null;
  private closing: Promise<void> | null = null;
  private pruning: Promise<void> | null = null;
  // Housekeeping timer only: never used to judge a lease.
  private lastPrune = 0;
  /**
   * Set while the disk refuses commits (full, read-only, failing: disk.ts); cleared by the
   * next commit that succeeds. Writes fail with it meanwhile; reads go on.
   */
  private diskFault: StoreUnavailableError | null = null;
  private diskProbe: Promise<void> | null = null;
  private lastDiskProbe = 0;

  private constructor(
    private readonly t: Tables,
    private readonly root: string,
    private readonly namespace: string,
    /** How long an idle lock record is kept (./retire.ts). */
    private readonly retentionMs: number,
  ) {}

  static async open(dir: string, opts: StoreOptions = {}): Promise<LmdbStore> {
    const namespace = opts.namespace ?? DEFAULT_NAMESPACE;
    const bad = namespaceProblem(namespace);
    if (bad !== null) throw new RangeError(bad);
    const root = resolve(dir);
    const what = `cannot open the embedded store in ${root}`;
    if (existsSync(join(root, PGLITE_DATA_DIR))) throw legacyRefusal(root);
    if (opts.mustExist === true && !existsSync(join(root, DATA_FILE))) {
      throw new StoreUnavailableError(`${what}: there is no embedded store there (no ${DATA_FILE})`);
    }
    guardCommitRejections();
    let t: Tables;
    try {
      mkdirSync(root, { recursive: true });
      t = openTables(join(root, DATA_FILE), namespace);
    } catch (err) {
      throw storeFailure(err, what);
    }
    const store = new LmdbStore(t, root, namespace, opts.lockRetentionMs ?? DEFAULT_LOCK_RETENTION_MS);
    try {
      await store.init(opts.mustExist === true);
      // On a full or read-only disk the process starts unregistered, and registers once a commit succeeds.
      store.mesh = await WakeMesh.start(
        root,
        store.peerRegistry(),
        (key) => store.dispatch(key),
        (err) => store.noteFailure(err).then((e) => store.diskFault === e),
      );
    } catch (err) {
      await store.close().catch(() => undefined);
      // lmdb's "Commit failed" names no cause: the error behind it does (ENOSPC …).
      throw storeFailure(await commitCause(err), what);
    }
    return store;
  }

  /**
   * Creates the namespace's format record and epoch if missing; refuses a format it cannot
   * read. Ties the epoch to the data file (docs/adr/0019-store-identity.md): a file that is
   * not the one that verified the epoch last (copied back from a backup, restored in place)
   * may hold older state than was acknowledged, so a new epoch starts above the store clock
   * before anything is granted or admitted.
   */
  private async init(mustExist: boolean): Promise<void> {
    this.identity = fileIdentity(this.dataFile);
    const found = await this.t.root.transaction(() => {
      let format = this.t.meta.get('format') as string | undefined;
      if (format === undefined && mustExist) return null;
      if (format === undefined || UPGRADABLE_FORMATS.includes(format)) {
        if (format !== undefined) migrateToCompact(this.t.root, this.namespace, this.t.lockRecords);
        this.t.meta.put('format', FORMAT_VERSION);
        format = FORMAT_VERSION;
      }
      if (this.t.meta.get('epoch') === undefined) {
        // A missing epoch (a new or lost namespace): a floor above every token lost state could have issued.
        const now = nowMs();
        const epoch: EpochRec = { id: randomUUID(), floor: (BigInt(now) * 1000n).toString(), startedAt: now };
        this.t.meta.put('epoch', epoch);
      }
      const recorded = this.t.meta.get('identity') as string | undefined;
      if (recorded !== undefined && recorded !== this.identity) {
        const now = nowMs();
        const before = this.t.meta.get('epoch') as EpochRec;
        const floor = locks.maxBig(BigInt(before.floor), BigInt(now) * 1000n);
        const epoch: EpochRec = { id: randomUUID(), floor: floor.toString(), startedAt: now };
        this.t.meta.put('epoch', epoch);
      }
      if (recorded !== this.identity) this.t.meta.put('identity', this.identity);
      return format;
    });
    if (found === null) {
      throw new StoreUnavailableError(
        `embedded store ${this.root} has no namespace "${this.namespace}" (never used by fencegate)`,
      );
    }
    if (found !== FORMAT_VERSION) {
      throw new StoreUnavailableError(
        `embedded store ${this.root} (namespace "${this.namespace}") has format ${found}, this fencegate reads ${FORMAT_VERSION}`,
      );
    }
  }

  private peerRegistry(): PeerRegistry {
    const peers = this.t.peers;
    return {
      add: async (id, peer) => {
        await peers.put(id, peer);
      },
      remove: async (id) => {
        await peers.remove(id);
      },
      list: () => {
        this.fresh();
        return [...peers.getRange({})].map(({ key, value }): [string, Peer] => [key, value]);
      },
    };
  }

  /** Reads after this see every transaction committed so far, by any process. */
  private fresh(): void {
    this.assertOpen();
    this.t.root.resetReadTxn();
  }

  private get dataFile(): string {
    return join(this.root, DATA_FILE);
  }

  /**
   * Open, and still serving the data file at its path. A file replaced under a running
   * process (a restore into the directory) cannot be served by it again: the process keeps
   * the deleted file mapped, and a process started afterwards reads the restored one. It
   * fails closed from then on (a reset; /readyz says why) until it is restarted.
   */
  private assertOpen(): void {
    if (this.closing) throw new StoreUnavailableError(`embedded store ${this.root}: store is closed`);
    if (this.replaced !== null) throw this.replaced;
    let now: string;
    try {
      now = fileIdentity(this.dataFile);
    } catch {
      now = 'missing';
    }
    if (now === this.identity) return;
    this.replaced = new StoreUnavailableError(
      `embedded store ${this.root}: its data file was replaced (or removed) while this process used it ` +
        '(a restore?); restart fencegate to serve the store now in the directory',
    );
    this.resets.emit({ reason: this.replaced.message, floor: locks.epochFloor(this.t) });
    throw this.replaced;
  }

  onReset(listener: (reset: StoreReset) => void): () => void {
    return this.resets.onReset(listener);
  }

  /** Notes the epoch after an operation that judged or minted tokens (a change is a reset). */
  private noteEpoch(): void {
    const e = this.t.meta.get('epoch') as EpochRec | undefined;
    if (e !== undefined)
      this.resets.epoch(e.id, BigInt(e.floor), 'the epoch changed (bumped, or the store was restored)');
  }

  /**
   * One write transaction (committed and synced when it resolves); wakes `notify` keys
   * after. The callbacks of one event-loop turn share LMDB's transaction, and lmdb commits
   * what a callback wrote even if it then throws: so each runs in a child transaction,
   * which a throw rolls back alone.
   */
  private async write<R>(fn: (now: number) => locks.Outcome<R>): Promise<R> {
    this.assertOpen();
    let out: locks.Outcome<R> | undefined;
    try {
      await this.t.root.transaction(() => {
        void this.t.root.childTransaction(() => {
          out = fn(nowMs());
        });
      });
      if (out === undefined) throw new Error('embedded store: a write transaction ended without its result');
    } catch (err) {
      if (err instanceof RangeError) throw err;
      throw await this.noteFailure(err);
    }
    this.committed();
    if (out.notify.length > 0) this.wake(out.notify);
    return out.result;
  }

  /**
   * A failed commit as the StoreUnavailableError its callers get. A disk fault (full,
   * read-only, I/O error: disk.ts) is remembered until a commit succeeds, and /readyz
   * names it ("disk full: ENOSPC").
   */
  private async noteFailure(err: unknown): Promise<StoreUnavailableError> {
    const cause = await commitCause(err);
    const fault = diskFault(cause);
    if (fault === null) return storeFailure(err, `embedded store ${this.root}`);
    this.diskFault = new StoreUnavailableError(
      `embedded store ${this.root}: ${fault.reason}; writes (grants, fenced writes) fail until it has room ` +
        `again, reads go on (${fault.message})`,
      { cause },
    );
    return this.diskFault;
  }

  /** After a commit that succeeded: the disk takes writes again. */
  private committed(): void {
    if (this.diskFault === null) return;
    this.diskFault = null;
    void this.mesh?.register();
  }

  /**
   * While the disk refuses commits, whether it takes one now (one small record, at most
   * every DISK_PROBE_EVERY_MS): so /readyz recovers without waiting for a write.
   */
  private probeDisk(): Promise<void> {
    if (this.diskProbe !== null) return this.diskProbe;
    if (Date.now() - this.lastDiskProbe < DISK_PROBE_EVERY_MS) return Promise.resolve();
    this.lastDiskProbe = Date.now();
    this.diskProbe = this.write((now) => {
      this.t.meta.put('diskProbe', now);
      return { result: undefined, notify: [] };
    })
      .catch(() => undefined) // noteFailure kept the fault
      .finally(() => {
        this.diskProbe = null;
      });
    return this.diskProbe;
  }

  private read<R>(fn: (now: number) => R): Promise<R> {
    try {
      this.fresh();
      return Promise.resolve(fn(nowMs()));
    } catch (err) {
      return Promise.reject(
        err instanceof StoreUnavailableError ? err : storeFailure(err, `embedded store ${this.root}`),
      );
    }
  }

  // ---- locks ----

  async tryAcquire(req: AcquireRequest): Promise<AcquireResult> {
    const r = await this.write((now) => locks.tryAcquire(this.t, req, now));
    this.noteEpoch();
    if (r.ok) this.resets.saw(r.lease.token);
    this.housekeep();
    return r;
  }

  renew(key: string, leaseId: string, ttlMs: number): Promise<RenewResult> {
    return this.write((now) => ({ result: locks.renew(this.t, key, leaseId, ttlMs, now), notify: [] }));
  }

  release(key: string, leaseId: string): Promise<ReleaseResult> {
    return this.write(() => locks.release(this.t, key, leaseId));
  }

  inspect(key: string): Promise<LockState | null> {
    return this.read((now) => locks.inspect(this.t, key, now));
  }

  enqueueWaiter(key: string, waiterId: string, waitMs: number): Promise<void> {
    return this.write((now) => ({
      result: locks.enqueueWaiter(this.t, key, waiterId, waitMs, now),
      notify: [],
    }));
  }

  removeWaiter(key: string, waiterId: string): Promise<void> {
    return this.write(() => locks.removeWaiter(this.t, key, waiterId));
  }

  listLocks(query: ListLocksQuery): Promise<LockPage> {
    return this.read((now) => locks.listLocks(this.t, query, now));
  }

  recentGrants(key: string): Promise<GrantRecord[]> {
    return this.read(() => locks.recentGrants(this.t, key));
  }

  // ---- fences ----

  async admit(req: AdmitRequest): Promise<AdmitResult> {
    if (req.record === false) return this.read((now) => fences.judgeOnly(this.t, req, now));
    const r = await this.write((now) => ({ result: fences.admit(this.t, req, now), notify: [] }));
    this.noteEpoch();
    if (r.ok) this.resets.saw(r.highest);
    this.housekeep();
    return r;
  }

  finish(lock: string, requestId: string): Promise<void> {
    return this.write(() => fences.finish(this.t, lock, requestId));
  }

  async deliver(lock: string, requestId: string, boundMs: number): Promise<boolean> {
    return this.write(() => fences.deliver(this.t, lock, requestId, boundMs));
  }

  lowerInflight(lock: string, token: FencingToken): Promise<InflightState> {
    return this.read(() => fences.lowerInflight(this.t, lock, token));
  }

  dropInflight(lock: string, sessions: readonly string[], maxBoundMs: number): Promise<void> {
    if (sessions.length === 0) return Promise.resolve();
    return this.write(() => fences.dropInflight(this.t, lock, sessions, maxBoundMs));
  }

  // ---- idempotency records ----

  beginIdempotent(req: IdempotentBegin): Promise<IdempotentBeginResult> {
    const r = this.write((now) => idempotency.begin(this.t, req, now));
    this.housekeep();
    return r;
  }

  finishIdempotent(done: IdempotentFinish): Promise<boolean> {
    return this.write((now) => idempotency.finish(this.t, done, now));
  }

  abandonIdempotent(key: string, attempt: string): Promise<void> {
    return this.write(() => idempotency.abandon(this.t, key, attempt));
  }

  openSession(id: string, ttlMs: number): Promise<void> {
    fences.checkSessionId(id);
    return this.write((now) => ({ result: fences.openSession(this.t, id, ttlMs, now), notify: [] }));
  }

  beatSession(id: string): Promise<BeatResult> {
    return this.write((now) => ({ result: fences.beatSession(this.t, id, now), notify: [] }));
  }

  readSessions(ids: readonly string[] | null): Promise<Map<string, SessionRecord>> {
    return this.read(() => fences.readSessions(this.t, ids));
  }

  endSession(id: string, ifBeat: number | null): Promise<boolean> {
    return this.write(() => fences.endSession(this.t, id, ifBeat));
  }

  // ---- notifications ----

  watch(key: string, fn: Listener): Promise<() => void> {
    try {
      this.assertOpen();
    } catch (err) {
      return Promise.reject(err);
    }
    // A fresh entry per call, so the same function may watch twice and unsubscribe each once.
    const entry = { fn };
    let set = this.listeners.get(key);
    if (!set) {
      set = new Set();
      this.listeners.set(key, set);
    }
    set.add(entry);
    return Promise.resolve(() => {
      const s = this.listeners.get(key);
      if (!s) return;
      s.delete(entry);
      if (s.size === 0) this.listeners.delete(key);
    });
  }

  /** After a commit: this process's watchers now, the other processes' through the mesh. */
  private wake(keys: readonly string[]): void {
    for (const key of keys) this.dispatch(key);
    this.mesh?.notify(keys);
  }

  private dispatch(key: string | null): void {
    const sets = key === null ? [...this.listeners.values()] : [this.listeners.get(key)];
    for (const set of sets) {
      if (!set) continue;
      for (const entry of [...set]) {
        try {
          entry.fn();
        } catch {
          // A listener's failure is its own; it must not stop the others.
        }
      }
    }
  }

  // ---- epochs ----

  bumpEpoch(): Promise<{ id: string; floor: FencingToken }> {
    return this.write((now) => {
      const floor = locks.maxBig(locks.epochFloor(this.t), BigInt(now) * 1000n);
      const epoch: EpochRec = { id: randomUUID(), floor: floor.toString(), startedAt: now };
      this.t.meta.put('epoch', epoch);
      return { result: { id: epoch.id, floor }, notify: [] };
    }).then((e) => {
      this.resets.epoch(e.id, e.floor, 'the epoch was bumped');
      return e;
    });
  }

  // ---- lifecycle ----

  now(): Promise<number> {
    return this.read((now) => now);
  }

  async health(): Promise<StoreHealth> {
    try {
      this.fresh();
      if (this.diskFault !== null) await this.probeDisk();
      if (this.diskFault !== null) throw this.diskFault;
      const e = this.t.meta.get('epoch') as EpochRec | undefined;
      return {
        ok: true,
        kind: this.kind,
        detail: `embedded store ${this.root} (LMDB), namespace "${this.namespace}", fsync (fdatasync) on every commit`,
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

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.listeners.clear();
      if (this.pruning) await this.pruning;
      await this.mesh?.close();
      await this.t.root.close();
    })();
    return this.closing;
  }

  /** Deletes expired records in the background, a round at most every PRUNE_EVERY_MS. */
  private housekeep(): void {
    if (this.closing || this.pruning) return;
    const t = Date.now();
    if (t - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = t;
    this.pruning = housekeep(this.t, () => this.closing !== null, this.retentionMs)
      .catch((err: unknown) => this.noteFailure(err)) // best effort: the next round retries
      .then(() => undefined)
      .finally(() => {
        this.pruning = null;
      });
  }
}

export function openEmbeddedStore(dir: string, opts: StoreOptions = {}): Promise<Store> {
  return LmdbStore.open(dir, opts);
}
