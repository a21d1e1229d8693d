/**
 * Where the etcd store keeps its records: one etcd key per record, `<namespace>/<table>/<key>`,
 * the tables of the embedded store (src/store/lmdb/db.ts) with the same records, JSON-encoded.
 * A lock key is written as its UTF-8 bytes, so etcd's byte order is the lock order listLocks
 * pages in; a grant's compound key is its JSON array. `<namespace>/wake/<lock>` is written in
 * every transaction that must wake the lock's watchers (watch.ts).
 */
export const TABLES = [
  'meta',
  'locks',
  'grants',
  'owners',
  'waiters',
  'inflight',
  'sessions',
  'idempotency',
] as const;
export type TableName = (typeof TABLES)[number];

export type RecordKey = string | readonly string[];

export function tablePrefix(ns: string, table: TableName): string {
  return `${ns}/${table}/`;
}

export function recordKey(ns: string, table: TableName, key: RecordKey): string {
  return tablePrefix(ns, table) + (typeof key === 'string' ? key : JSON.stringify(key));
}

/** The record key back from an etcd key of `table` (a grant's as its array). */
export function fromRecordKey(ns: string, table: TableName, etcdKey: string): RecordKey {
  const rest = etcdKey.slice(tablePrefix(ns, table).length);
  return table === 'grants' ? (JSON.parse(rest) as string[]) : rest;
}

export function wakeKey(ns: string, lock: string): string {
  return `${ns}/wake/${lock}`;
}

/** The first key after every key that starts with `prefix` (etcd's range_end for a prefix). */
export function prefixEnd(prefix: string): Buffer {
  const b = Buffer.from(prefix);
  for (let i = b.length - 1; i >= 0; i--) {
    if (b[i]! < 0xff) {
      const end = Buffer.from(b.subarray(0, i + 1));
      end[i] = b[i]! + 1;
      return end;
    }
  }
  return Buffer.from([0]);
}
