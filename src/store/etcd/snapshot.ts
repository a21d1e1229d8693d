/**
 * One optimistic transaction's view of the etcd store: the records it read (each with
 * the revision it was last modified at, '0' when absent) and the records it writes. It
 * implements the record tables the embedded store's rules run on (src/store/lmdb/locks.ts,
 * fences.ts), so those rules run here unchanged: the etcd store has no lock or fence
 * logic of its own, only this view and its commit (txn.ts).
 *
 * The rules read synchronously; a record not loaded yet throws Missing, the runner loads
 * it (at the same revision) and runs the rule again from the start. The commit compares
 * every record read with the revision it was read at: a transaction that read anything
 * someone else changed since commits nothing and is run again.
 */
import type { RecordTable, RecordTables } from '../lmdb/db.js';
import { fromRecordKey, recordKey, tablePrefix, type RecordKey, type TableName } from './keys.js';

export interface Read {
  value: Buffer | null;
  /** mod_revision when read; '0' for a record that did not exist. */
  mod: string;
}

/** A range of one table, read in key order from `start` (an etcd key), at most `limit` records. */
export interface RangeAsk {
  table: TableName;
  start: string;
  limit: number;
}

export interface RangeRead extends RangeAsk {
  /** The etcd keys found, in order. */
  keys: string[];
  /** True when the table had more records after the last one. */
  more: boolean;
}

/** Thrown by a rule's read of something not loaded yet: load it and run the rule again. */
export class Missing extends Error {
  constructor(
    readonly keys: string[],
    readonly ranges: RangeAsk[],
  ) {
    super('etcd store: a record was not loaded yet');
  }
}

/** How many records a range read asks for first; each time it proves short, four times more. */
export const FIRST_RANGE = 64;

export class Snapshot implements RecordTables {
  readonly reads = new Map<string, Read>();
  readonly ranges = new Map<string, RangeRead>();
  /** etcd key → the JSON to put, or null to delete. */
  readonly writes = new Map<string, Buffer | null>();
  /** The revision every read of this transaction is made at (set by the first read). */
  revision: string | null = null;

  readonly meta = this.table<unknown>('meta');
  readonly locks = this.table<import('../lmdb/db.js').LockRec>('locks');
  readonly grants = this.table<import('../lmdb/db.js').GrantRec, [string, string, string]>('grants');
  readonly owners = this.table<[string, string][]>('owners');
  readonly waiters = this.table<import('../lmdb/db.js').WaiterRec[]>('waiters');
  readonly inflight = this.table<import('../lmdb/db.js').InflightRec>('inflight');
  readonly sessions = this.table<import('../lmdb/db.js').SessionRec>('sessions');
  readonly idempotency = this.table<import('../lmdb/db.js').IdempotencyRec>('idempotency');

  constructor(readonly ns: string) {}

  /** The current value of an etcd key in this transaction (its own writes first). */
  private value(key: string): Buffer | null {
    const written = this.writes.get(key);
    if (written !== undefined) return written;
    const read = this.reads.get(key);
    if (read !== undefined) return read.value;
    if (this.covered(key)) return null;
    throw new Missing([key], []);
  }

  /** Whether a range read already covers `key` (then a key it did not find is absent). */
  private covered(key: string): boolean {
    for (const r of this.ranges.values()) {
      if (
        !key.startsWith(tablePrefix(this.ns, r.table)) ||
        Buffer.compare(Buffer.from(key), Buffer.from(r.start)) < 0
      )
        continue;
      const last = r.keys[r.keys.length - 1];
      if (!r.more || (last !== undefined && Buffer.compare(Buffer.from(key), Buffer.from(last)) <= 0))
        return true;
    }
    return false;
  }

  private *range(table: TableName, start: string): Generator<string> {
    const id = rangeId(table, start);
    const r = this.ranges.get(id);
    if (r === undefined) throw new Missing([], [{ table, start, limit: FIRST_RANGE }]);
    for (const key of this.withWrites(r)) if (this.value(key) !== null) yield key;
    if (r.more) throw new Missing([], [{ table, start, limit: r.limit * 4 }]);
  }

  /**
   * The keys of a range read and the keys this transaction wrote inside it (an operation
   * earlier in a group may have put one the read did not find), in etcd's byte order.
   */
  private withWrites(r: RangeRead): string[] {
    const prefix = tablePrefix(this.ns, r.table);
    const last = r.keys[r.keys.length - 1];
    const inside = (k: string) =>
      k.startsWith(prefix) &&
      Buffer.compare(Buffer.from(k), Buffer.from(r.start)) >= 0 &&
      (!r.more || (last !== undefined && Buffer.compare(Buffer.from(k), Buffer.from(last)) <= 0));
    const read = new Set(r.keys);
    const added = [...this.writes.keys()].filter((k) => !read.has(k) && inside(k));
    if (added.length === 0) return r.keys;
    return [...r.keys, ...added].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  }

  /**
   * Lazily, so a rule that stops early (a full page) never asks for more of the range
   * than it used: reading past what was loaded throws Missing for a longer range.
   */
  private *entries<V, K>(
    name: TableName,
    keys: Iterable<string>,
    decode: (b: Buffer) => V,
  ): Generator<{ key: K; value: V }> {
    for (const ek of keys)
      yield { key: fromRecordKey(this.ns, name, ek) as K, value: decode(this.value(ek) as Buffer) };
  }

  private table<V, K extends RecordKey = string>(name: TableName): RecordTable<V, K> {
    const key = (k: K) => recordKey(this.ns, name, k);
    const decode = (b: Buffer) => decodeRecord<V>(name, b);
    // Read when called: the tables are made before the constructor sets `ns`.
    const range = (start: K | undefined) =>
      this.range(name, start === undefined ? tablePrefix(this.ns, name) : key(start));
    const entries = (start: K | undefined) => this.entries<V, K>(name, range(start), decode);
    return {
      get: (k) => {
        const v = this.value(key(k));
        return v === null ? undefined : decode(v);
      },
      put: (k, v) => this.writes.set(key(k), encodeRecord(name, v)),
      remove: (k) => this.writes.set(key(k), null),
      getRange: ({ start }) => entries(start),
      getKeys: () => keysOf(entries(undefined)),
    };
  }
}

/**
 * A record as etcd holds it: JSON. Only idempotency records hold bytes: the other tables'
 * records are read and written without a reviver or replacer called on every member.
 */
export function decodeRecord<V>(table: TableName, b: Buffer): V {
  return JSON.parse(b.toString('utf8'), table === 'idempotency' ? reviveBytes : undefined) as V;
}

export function encodeRecord(table: TableName, value: unknown): Buffer {
  return Buffer.from(JSON.stringify(value, table === 'idempotency' ? replaceBytes : undefined));
}

export function rangeId(table: TableName, start: string): string {
  return `${table}\u0000${start}`;
}

function* keysOf<K>(entries: Iterable<{ key: K }>): Generator<K> {
  for (const e of entries) yield e.key;
}

/**
 * Bytes in a record (an idempotency record's kept answer) go to JSON as base64, not as
 * Buffer's own `{type, data: [...]}` (three to four times the size, and back as a plain
 * object): `{"$bytes": "<base64>"}`, read back as a Buffer.
 */
function replaceBytes(_key: string, value: unknown): unknown {
  if (
    typeof value === 'object' &&
    value !== null &&
    (value as { type?: unknown }).type === 'Buffer' &&
    Array.isArray((value as { data?: unknown }).data)
  )
    return { $bytes: Buffer.from((value as { data: number[] }).data).toString('base64') };
  return value;
}

function reviveBytes(_key: string, value: unknown): unknown {
  if (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { $bytes?: unknown }).$bytes === 'string'
  )
    return Buffer.from((value as { $bytes: string }).$bytes, 'base64');
  return value;
}
