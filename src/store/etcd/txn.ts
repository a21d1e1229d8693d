/**
 * Runs a record rule as one optimistic etcd transaction: take what it reads from the
 * records this process last saw (cache.ts), load the rest (one etcd txn of range reads,
 * every one at the same revision), run it on a Snapshot, then commit
 * its writes in a txn whose compares say "every record I read is still at the revision I
 * read it at" (mod_revision equal; 0 for a record that was absent). A commit that finds
 * anything changed writes nothing, and the rule runs again on fresh reads. The wake keys
 * of the outcome are written in the same txn, so a watcher is woken exactly when the
 * change it waits for is committed.
 *
 * A rule that writes nothing (a refusal, a read) commits nothing: its reads were one
 * linearizable etcd read, which is its answer.
 */
import { CompareResult, CompareTarget, type IRequestOp, type IResponseHeader, type KVClient } from 'etcd3';
import type { Outcome } from '../lmdb/locks.js';
import { CommitBatcher } from './batch.js';
import { RecordCache } from './cache.js';
import { prefixEnd, tablePrefix, wakeKey } from './keys.js';
import { Missing, rangeId, Snapshot, type RangeAsk } from './snapshot.js';

/**
 * Store identity (identity.ts): `sent` is called as each request goes out, and its
 * answer's header is checked against what it returned.
 */
export interface HeaderCheck {
  sent(): bigint;
  check(header: IResponseHeader, sentAt: bigint): void;
}

/** One operation of a group: the keys to load up front and its rule. */
export interface GroupOp<R> {
  keys: readonly string[];
  rule: (snap: Snapshot) => Outcome<R>;
}

export type Settled<R> = { ok: true; value: R } | { ok: false; error: unknown };

/**
 * Runs each rule in order on `snap`. Missing (a record not loaded) propagates: the caller
 * loads it and runs them all again. Any other error is that rule's answer, and the writes
 * it made before throwing are taken back.
 */
function applyAll<R>(snap: Snapshot, group: readonly GroupOp<R>[]): Settled<Outcome<R>>[] {
  return group.map((op) => {
    const before = new Map(snap.writes);
    try {
      return { ok: true, value: op.rule(snap) };
    } catch (error) {
      if (error instanceof Missing) throw error;
      snap.writes.clear();
      for (const [k, v] of before) snap.writes.set(k, v);
      return { ok: false, error };
    }
  });
}

/** Conflicts in a row after which a transaction waits a little (jittered) before trying again. */
const CALM_AFTER = 3;

export class TxnRunner {
  private readonly cache = new RecordCache();
  private readonly batch: CommitBatcher;

  constructor(
    private readonly kv: KVClient,
    private readonly ns: string,
    private readonly onHeader: HeaderCheck,
  ) {
    this.batch = new CommitBatcher(kv);
  }

  /**
   * Runs `rule` until it commits (or, when it wrote nothing, until it ran on one
   * consistent read). `keys` are etcd keys to load up front, so most rules need one
   * read round trip and one commit.
   */
  async run<R>(
    keys: readonly string[],
    rule: (snap: Snapshot) => Outcome<R>,
    firstRanges: readonly RangeAsk[] = [],
  ): Promise<R> {
    const [only] = await this.runGroup([{ keys, rule }], firstRanges);
    if (only === undefined) throw new Error('etcd store: a group of one answered nothing');
    if (!only.ok) throw only.error;
    return only.value;
  }

  /**
   * Runs the rules of `group` in order on one snapshot, each seeing the writes of those
   * before it, and commits their writes in one transaction: as if each had committed
   * alone, one after the other, with nothing between them (they are one lock's queue,
   * serial.ts). A conflict runs the whole group again on fresh reads. A rule that throws
   * (other than for a record not loaded) fails alone: its writes are undone and the
   * others go on.
   */
  async runGroup<R>(
    group: readonly GroupOp<R>[],
    firstRanges: readonly RangeAsk[] = [],
  ): Promise<Settled<R>[]> {
    const wanted = new Set(group.flatMap((op) => op.keys));
    const ranges = new Map(firstRanges.map((r) => [rangeId(r.table, r.start), r]));
    for (let attempt = 1; ; attempt++) {
      const snap = new Snapshot(this.ns);
      let cached = false;
      for (const k of wanted) {
        const read = this.cache.get(k);
        if (read !== undefined) {
          snap.reads.set(k, read);
          cached = true;
        }
      }
      await this.load(snap, [...wanted], [...ranges.values()]);
      let outs: Settled<Outcome<R>>[];
      for (;;) {
        try {
          outs = applyAll(snap, group);
          break;
        } catch (err) {
          if (!(err instanceof Missing)) throw err;
          snap.writes.clear();
          for (const k of err.keys) wanted.add(k);
          for (const r of err.ranges) ranges.set(rangeId(r.table, r.start), r);
          await this.load(snap, err.keys, err.ranges);
        }
      }
      const notify = outs.flatMap((o) => (o.ok ? o.value.notify : []));
      if (await this.commit(snap, notify, cached))
        return outs.map((o) => (o.ok ? { ok: true, value: o.value.result } : o));
      if (attempt >= CALM_AFTER) await new Promise((r) => setTimeout(r, Math.random() * 2 * attempt));
    }
  }

  /** Reads keys and ranges into the snapshot, at its revision (the first read sets it). */
  private async load(snap: Snapshot, keys: readonly string[], ranges: readonly RangeAsk[]): Promise<void> {
    const todo = keys.filter((k) => !snap.reads.has(k));
    if (todo.length === 0 && ranges.length === 0) return;
    const revision = snap.revision ?? undefined;
    const ops: IRequestOp[] = [
      ...todo.map((k) => ({ request_range: { key: Buffer.from(k), revision } })),
      ...ranges.map((r) => ({
        request_range: {
          key: Buffer.from(r.start),
          range_end: prefixEnd(tablePrefix(this.ns, r.table)),
          limit: r.limit,
          revision,
        },
      })),
    ];
    const sentAt = this.onHeader.sent();
    const res = await this.kv.txn({ success: ops });
    this.onHeader.check(res.header, sentAt);
    snap.revision ??= res.header.revision;
    todo.forEach((k, i) => {
      const kv = res.responses[i]?.response_range.kvs[0];
      const read = kv === undefined ? { value: null, mod: '0' } : { value: kv.value, mod: kv.mod_revision };
      snap.reads.set(k, read);
      this.cache.set(k, read);
    });
    ranges.forEach((r, i) => {
      const got = res.responses[todo.length + i]?.response_range;
      const found: string[] = [];
      for (const kv of got?.kvs ?? []) {
        const k = kv.key.toString('utf8');
        found.push(k);
        if (!snap.reads.has(k)) snap.reads.set(k, { value: kv.value, mod: kv.mod_revision });
      }
      snap.ranges.set(rangeId(r.table, r.start), { ...r, keys: found, more: got?.more === true });
    });
  }

  /**
   * True when it committed, or had nothing to commit. A rule that wrote nothing but read a
   * cached record commits nothing either: its compares alone check that what it read is
   * current (its answer is then one linearizable read). A failed commit reads every record
   * it compared, in its failure branch, into the cache for the next attempt.
   */
  private async commit(snap: Snapshot, notify: readonly string[], cached: boolean): Promise<boolean> {
    if (snap.writes.size === 0 && notify.length === 0 && !cached) return true;
    const success: IRequestOp[] = [];
    for (const [key, value] of snap.writes) {
      success.push(
        value === null
          ? { request_delete_range: { key: Buffer.from(key) } }
          : { request_put: { key: Buffer.from(key), value } },
      );
    }
    const stamp = Buffer.from(snap.revision ?? '');
    for (const lock of new Set(notify)) {
      success.push({ request_put: { key: Buffer.from(wakeKey(this.ns, lock)), value: stamp } });
    }
    const compared = [...snap.reads];
    const compare = compared.map(([key, read]) => ({
      key: Buffer.from(key),
      target: CompareTarget.Mod,
      result: CompareResult.Equal,
      mod_revision: read.mod,
    }));
    const failure = compared.map(([key]) => ({ request_range: { key: Buffer.from(key) } }));
    const writes = new Set(snap.writes.keys());
    for (const lock of notify) writes.add(wakeKey(this.ns, lock));
    const sentAt = this.onHeader.sent();
    const res = await this.batch.commit({ compare, success, failure }, writes);
    this.onHeader.check(res.header, sentAt);
    if (res.succeeded) {
      // Every record it wrote now has the txn's revision.
      for (const [key, value] of snap.writes) {
        this.cache.set(key, value === null ? { value: null, mod: '0' } : { value, mod: res.header.revision });
      }
      return true;
    }
    compared.forEach(([key], i) => {
      const kv = res.responses[i]?.response_range.kvs[0];
      this.cache.set(
        key,
        kv === undefined ? { value: null, mod: '0' } : { value: kv.value, mod: kv.mod_revision },
      );
    });
    return false;
  }
}
