/**
 * Housekeeping of the etcd store: the embedded store's (src/store/lmdb/prune.ts, whose
 * `expired` rules it applies) on etcd. Expired grant replay records, queues whose waiters
 * all expired, idempotency records no longer live, and in-flight entries of ended
 * sessions that were not delivering are removed; nothing else is touched.
 *
 * Each table is read in pages of PAGE records (one range read each, at most one page
 * held), and each page's candidates are removed in one etcd txn of nested txns, each
 * comparing its record's mod_revision with the one read: a record that changed since
 * (a grant replayed, a waiter joined a queue, an entry added) is left alone, and one
 * candidate's change does not stop the others. Several gateways sweeping at once only
 * repeat each other's compares.
 */
import { CompareResult, CompareTarget, type IRequestOp, type KVClient } from 'etcd3';
import type { GrantRec, IdempotencyRec, InflightRec, WaiterRec } from '../lmdb/db.js';
import { expired } from '../lmdb/prune.js';
import { prefixEnd, tablePrefix, type TableName } from './keys.js';
import { decodeRecord, encodeRecord } from './snapshot.js';

/** Records read per range read. */
export const PAGE = 500;
/** Nested txns per etcd txn, under etcd's default --max-txn-ops (128). */
const OPS_PER_TXN = 100;

interface Found {
  key: Buffer;
  mod: string;
  value: Buffer;
}

/** A candidate's removal (null value) or rewrite, only if the record is still as read. */
interface Change {
  found: Found;
  value: Buffer | null;
}

export interface SweepCounts {
  grants: number;
  waiters: number;
  idempotency: number;
  inflight: number;
}

export class EtcdHousekeeper {
  constructor(
    private readonly kv: KVClient,
    private readonly ns: string,
    private readonly page: number = PAGE,
  ) {}

  /** One round over every table; returns how many records each lost or had rewritten. */
  async round(now: () => number, stopped: () => boolean): Promise<SweepCounts> {
    const counts: SweepCounts = { grants: 0, waiters: 0, idempotency: 0, inflight: 0 };
    counts.grants = await this.sweep('grants', stopped, (f) =>
      expired.grant(decodeRecord<GrantRec>('grants', f.value), now()) ? null : undefined,
    );
    counts.waiters = await this.sweep('waiters', stopped, (f) =>
      expired.queue(decodeRecord<WaiterRec[]>('waiters', f.value), now()) ? null : undefined,
    );
    counts.idempotency = await this.sweep('idempotency', stopped, (f) =>
      expired.idempotency(decodeRecord<IdempotencyRec>('idempotency', f.value), now()) ? null : undefined,
    );
    const sessions = await this.sessions();
    counts.inflight = await this.sweep('inflight', stopped, (f) => {
      const entries = decodeRecord<InflightRec>('inflight', f.value);
      const rest = Object.entries(entries).filter(
        ([, entry]) => !expired.leftoverEntry(entry, (id) => sessions.has(id)),
      );
      if (rest.length === Object.keys(entries).length) return undefined;
      return rest.length === 0 ? null : encodeRecord('inflight', Object.fromEntries(rest));
    });
    return counts;
  }

  /** The live session ids (read once per round: a session ended later only leaves its entries one round longer). */
  private async sessions(): Promise<Set<string>> {
    const ids = new Set<string>();
    const prefix = tablePrefix(this.ns, 'sessions');
    await this.pages(
      'sessions',
      () => false,
      (found) => {
        for (const f of found) ids.add(f.key.toString('utf8').slice(prefix.length));
        return Promise.resolve(0);
      },
    );
    return ids;
  }

  /**
   * Sweeps `table`: `judge` says of each record whether to leave it (undefined), remove it
   * (null) or rewrite it (the new value). Returns how many were removed or rewritten.
   */
  private sweep(
    table: TableName,
    stopped: () => boolean,
    judge: (f: Found) => Buffer | null | undefined,
  ): Promise<number> {
    return this.pages(table, stopped, async (found) => {
      const changes: Change[] = [];
      for (const f of found) {
        const value = judge(f);
        if (value !== undefined) changes.push({ found: f, value });
      }
      return this.apply(changes);
    });
  }

  private async pages(
    table: TableName,
    stopped: () => boolean,
    each: (found: Found[]) => Promise<number>,
  ): Promise<number> {
    const end = prefixEnd(tablePrefix(this.ns, table));
    let start = Buffer.from(tablePrefix(this.ns, table));
    let total = 0;
    for (;;) {
      if (stopped()) return total;
      const res = await this.kv.range({ key: start, range_end: end, limit: this.page });
      const found = res.kvs.map((kv) => ({ key: kv.key, mod: kv.mod_revision, value: kv.value }));
      total += await each(found);
      const last = found[found.length - 1];
      if (!res.more || last === undefined) return total;
      start = Buffer.concat([last.key, Buffer.from([0])]); // the first key after the last one read
    }
  }

  /** Applies the changes whose records are unchanged; returns how many applied. */
  private async apply(changes: Change[]): Promise<number> {
    let applied = 0;
    for (let i = 0; i < changes.length; i += OPS_PER_TXN) {
      const batch = changes.slice(i, i + OPS_PER_TXN);
      const res = await this.kv.txn({
        success: batch.map(({ found, value }) => ({
          request_txn: {
            compare: [
              {
                key: found.key,
                target: CompareTarget.Mod,
                result: CompareResult.Equal,
                mod_revision: found.mod,
              },
            ],
            success: [op(found.key, value)],
            failure: [],
          },
        })),
      });
      for (const r of res.responses) if (r.response_txn?.succeeded === true) applied += 1;
    }
    return applied;
  }
}

function op(key: Buffer, value: Buffer | null): IRequestOp {
  return value === null ? { request_delete_range: { key } } : { request_put: { key, value } };
}
