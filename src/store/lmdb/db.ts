/**
 * The embedded store's data: one LMDB environment in the store directory
 * (`fencegate.mdb` and its `-lock` file), opened by every process that uses the
 * directory. LMDB serialises writers across processes with a robust mutex in the
 * lock file (a writer killed mid-transaction releases it and its transaction is
 * rolled back), and readers never wait (MVCC snapshots of the memory map).
 *
 * Each namespace has its own named databases, `<namespace>/<table>`. Keys are
 * strings (lock keys sort in UTF-8 byte order, as the other stores list them);
 * values are msgpack records, except the lock records, laid out by hand (./record.ts:
 * one per lock, with its grant history). Tokens are decimal strings in msgpack records
 * and bigint in code: msgpack would turn a large integer into a double on some paths.
 *
 * Durability: every write transaction commits with fdatasync before its promise
 * resolves (overlappingSync off: the sync happens inside the commit), so an
 * acknowledged grant survives kill -9 and power loss. See docs/adr/0009-embedded-store.md.
 */
import { open, type Database, type RootDatabase } from 'lmdb';
import { lockCodec, type LockRec, type StoredLock } from './record.js';

/** The file LMDB keeps its data in, inside the store directory (with `fencegate.mdb-lock`). */
export const DATA_FILE = 'fencegate.mdb';
/**
 * Bumped when the records change in a way an older fencegate cannot read or would
 * misjudge. 2: in-flight entries carry a delivery bound and locks a shadow record (a
 * format-1 namespace is upgraded in place: its records read as bound 0 and no shadow).
 * 3: one compact record per lock, its grant history inside it (./record.ts; a format-1
 * or 2 namespace is rewritten when it opens: ./migrate.ts).
 */
export const FORMAT_VERSION = '3';
/** Formats this fencegate upgrades to FORMAT_VERSION when it opens them. */
export const UPGRADABLE_FORMATS: readonly string[] = ['1', '2'];

export type { LockRec } from './record.js';

/** Idempotency record of a grant: kept until keepUntil (≥ max(ttl, 10 min)). */
export interface GrantRec {
  leaseId: string;
  token: string;
  ttlMs: number;
  expiresAt: number;
  tookOver: boolean;
  keepUntil: number;
}

/** One queued waiter; a key's queue is an array in FIFO order. */
export interface WaiterRec {
  id: string;
  deadline: number;
}

/**
 * A key's in-flight writes: request id → [token, session id, delivery bound ms] (the
 * bound absent in format 1, read as 0: the write was not delivering).
 */
export type InflightRec = Record<string, [string, string, number?]>;

/**
 * An idempotency record (./idempotency.ts): in flight while `response` is null (held by
 * `attempt` until `until`), done once it has one (kept until `until`).
 */
export interface IdempotencyRec {
  fingerprint: string;
  attempt: string | null;
  /** Store-clock ms: the end of the hold (in flight) or of the ttl (done). */
  until: number;
  response: Buffer | null;
}

export interface SessionRec {
  beat: number;
  ttlMs: number;
  startedAt: number;
}

export interface EpochRec {
  id: string;
  floor: string;
  startedAt: number;
}

/**
 * What the record rules (locks.ts, fences.ts) use of a table: synchronous reads and
 * writes inside one transaction. An LMDB database is one; so is the etcd store's view of
 * the keys one optimistic transaction read (src/store/etcd/snapshot.ts), which runs the
 * same rules.
 */
export interface RecordTable<V, K> {
  get(key: K): V | undefined;
  put(key: K, value: V): unknown;
  remove(key: K): unknown;
  /** In key order (UTF-8 bytes) from `start` (inclusive), or the whole table. */
  getRange(options: { start?: K }): Iterable<{ key: K; value: V }>;
  getKeys(options: Record<string, never>): Iterable<K>;
}

/** The records every namespace keeps, as the rules see them. */
export interface RecordTables {
  /** 'format' → FORMAT_VERSION, 'epoch' → EpochRec, 'retired' → the retired floor (./retire.ts) */
  meta: RecordTable<unknown, string>;
  locks: RecordTable<LockRec, string>;
  /** key [lock key, request id, owner] */
  grants: RecordTable<GrantRec, [string, string, string]>;
  /**
   * lock key → the last GRANT_HISTORY grants, newest first: [token, owner][] (LMDB: part
   * of the lock's record; the `owners` table is read only to upgrade format 2).
   */
  owners: RecordTable<[string, string][], string>;
  waiters: RecordTable<WaiterRec[], string>;
  inflight: RecordTable<InflightRec, string>;
  sessions: RecordTable<SessionRec, string>;
  /** Idempotency records: key → IdempotencyRec. */
  idempotency: RecordTable<IdempotencyRec, string>;
}

export interface Tables extends RecordTables {
  root: RootDatabase;
  meta: Database<unknown, string>;
  /** The lock records as stored (./record.ts): each lock with its grant history. */
  lockRecords: Database<StoredLock, string>;
  grants: Database<GrantRec, [string, string, string]>;
  waiters: Database<WaiterRec[], string>;
  inflight: Database<InflightRec, string>;
  sessions: Database<SessionRec, string>;
  /** Idempotency records: key → IdempotencyRec. */
  idempotency: Database<IdempotencyRec, string>;
  /** Processes of this directory that take wake-ups: id → pid and socket path (not namespaced). */
  peers: Database<{ pid: number; path: string }, string>;
}

/** Address space reserved for the data file's map: 16 GiB, far above any fencegate store. */
export const MAP_SIZE = 16 * 1024 ** 3;

/** Named databases per namespace (8) times the namespaces one directory may hold, plus peers. */
const MAX_DBS = 8 * 16 + 1;

export function openTables(path: string, namespace: string): Tables {
  const root = open({
    path,
    maxDbs: MAX_DBS,
    // The commit promise resolves after fdatasync (see above), not merely when visible.
    overlappingSync: false,
    compression: false,
    // The address space mapped once, up front (not memory: the file grows as data comes,
    // and only pages touched are resident). Left to grow, the map was remapped in steps
    // and each older mapping stayed resident next to the new one (issue 30).
    mapSize: MAP_SIZE,
  });
  const named = <V, K extends string | number | string[]>(table: string): Database<V, K> =>
    root.openDB<V, K>({ name: `${namespace}/${table}` });
  // `encoder` is a Database option lmdb reads (not in its option types): the record's own layout.
  const lockOptions = { name: `${namespace}/locks`, encoder: lockCodec };
  const lockRecords = root.openDB<StoredLock, string>(lockOptions);
  return {
    root,
    meta: named('meta'),
    lockRecords,
    locks: lockTable(lockRecords),
    owners: ownersTable(lockRecords),
    grants: named('grants'),
    waiters: named('waiters'),
    inflight: named('inflight'),
    sessions: named('sessions'),
    idempotency: named('idempotency'),
    peers: root.openDB<{ pid: number; path: string }, string>({ name: 'peers' }),
  };
}

/**
 * The rules' view of the lock records without their grant history: a lock written back
 * keeps the history its record has (the rules write a lock as a whole, without it), and
 * is stamped with the time of the write (when it became idle, for retirement).
 */
function lockTable(records: Database<StoredLock, string>): RecordTable<LockRec, string> {
  return {
    get: (key) => records.get(key),
    put: (key, value) => {
      const owners = (value as StoredLock).owners ?? records.get(key)?.owners;
      const stored: StoredLock = { ...value, touched: nowMs() };
      if (owners !== undefined) stored.owners = owners;
      return records.put(key, stored);
    },
    remove: (key) => records.remove(key),
    getRange: (options) => records.getRange(options),
    getKeys: (options) => records.getKeys(options),
  };
}

/** The rules' view of the grant history: the `owners` part of each lock's record. */
function ownersTable(records: Database<StoredLock, string>): RecordTable<[string, string][], string> {
  const withOwners = (options: { start?: string }) =>
    records
      .getRange(options)
      .filter(({ value }) => value.owners !== undefined)
      .map(({ key, value }) => ({ key, value: value.owners ?? [] }));
  return {
    get: (key) => records.get(key)?.owners,
    put: (key, owners) => {
      const l = records.get(key);
      if (l === undefined)
        throw new Error(`embedded store: grant history for ${key}, which has no lock record`);
      return records.put(key, { ...l, owners });
    },
    remove: (key) => {
      const l = records.get(key);
      if (l === undefined || l.owners === undefined) return false;
      const { owners: _owners, ...rest } = l;
      return records.put(key, rest);
    },
    getRange: withOwners,
    getKeys: () => withOwners({}).map(({ key }) => key),
  };
}

/** The store clock: this machine's clock, shared by every process of the directory. */
export function nowMs(): number {
  return Date.now();
}
