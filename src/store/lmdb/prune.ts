/**
 * Housekeeping of the embedded store: expired idempotency records (of grants and of the
 * gateway's Idempotency-Key requests), queues whose
 * waiters all expired, in-flight entries whose gateway session has ended (ending a
 * session removes them; this catches leftovers), and lock records idle for the retention
 * (./retire.ts). Each table is read in passes of at most
 * PRUNE_PASS records, outside any transaction, from where the last pass stopped; each
 * pass's candidates are re-checked and deleted in write transactions of at most BATCH, so
 * housekeeping never holds the write lock for long, never deletes a record that changed
 * meanwhile, and never holds more than one pass of records in memory: a table of a
 * million locks costs the same memory to sweep as one of five thousand (issue 30).
 */
import type { Database } from 'lmdb';
import type { GrantRec, IdempotencyRec, InflightRec, Tables, WaiterRec } from './db.js';
import { nowMs } from './db.js';
import { live } from './idempotency.js';
import { idleRecord, retire } from './retire.js';

const BATCH = 500;
/** Records read per pass at most; the candidates of one pass are all that is held. */
export const PRUNE_PASS = 5_000;

async function inBatches<K>(candidates: K[], t: Tables, drop: (key: K, now: number) => void): Promise<void> {
  for (let i = 0; i < candidates.length; i += BATCH) {
    const batch = candidates.slice(i, i + BATCH);
    await t.root.transaction(() => {
      const now = nowMs();
      for (const key of batch) drop(key, now);
    });
  }
}

/**
 * Sweeps `table` in passes of `pass` records: `stale` picks the candidates of a pass
 * (judged at the pass's start), `drop` re-checks and deletes one inside a transaction.
 * Returns the number of passes made (for tests).
 */
export async function sweepTable<K extends string | string[], V>(
  t: Tables,
  table: Database<V, K>,
  stale: (value: V, now: number) => boolean,
  drop: (key: K, now: number) => void,
  stopped: () => boolean,
  pass: number = PRUNE_PASS,
): Promise<number> {
  let start: K | undefined;
  let passes = 0;
  for (;;) {
    if (stopped()) return passes;
    t.root.resetReadTxn();
    const now = nowMs();
    const candidates: K[] = [];
    let read = 0;
    let last: K | undefined;
    // A later pass starts at the previous pass's last record (if it is still there): skipped.
    let skipFirst = start !== undefined;
    const range = table.getRange(start === undefined ? { limit: pass } : { start, limit: pass + 1 });
    for (const { key, value } of range) {
      if (skipFirst) {
        skipFirst = false;
        if (sameKey(key, start)) continue;
      }
      if (read === pass) break;
      read += 1;
      last = key;
      if (stale(value, now)) candidates.push(key);
    }
    passes += 1;
    await inBatches(candidates, t, drop);
    if (last === undefined || read < pass) return passes;
    start = last;
  }
}

function sameKey(a: unknown, b: unknown): boolean {
  return Array.isArray(a) && Array.isArray(b)
    ? a.length === b.length && a.every((x, i) => x === b[i])
    : a === b;
}

/**
 * What housekeeping removes, judged at `now`: one home for the embedded and etcd stores'
 * sweeps. A grant's replay record past its keep time; a queue whose every waiter's
 * deadline passed; an idempotency record no longer live; an in-flight entry of an ended
 * session that was not delivering (a delivering one is left to the gateway that watches
 * it for its bound).
 */
export const expired = {
  grant: (g: GrantRec, now: number): boolean => g.keepUntil <= now,
  queue: (q: readonly WaiterRec[], now: number): boolean => q.every((w) => w.deadline <= now),
  idempotency: (rec: IdempotencyRec | undefined, now: number): boolean => !live(rec, now),
  leftoverEntry: (
    [, session, bound = 0]: InflightRec[string],
    sessionLive: (id: string) => boolean,
  ): boolean => bound === 0 && !sessionLive(session),
};

export async function housekeep(
  t: Tables,
  stopped: () => boolean,
  retentionMs: number,
  pass: number = PRUNE_PASS,
): Promise<void> {
  await sweepTable(
    t,
    t.grants,
    expired.grant,
    (key, at) => {
      const g = t.grants.get(key);
      if (g !== undefined && expired.grant(g, at)) t.grants.remove(key);
    },
    stopped,
    pass,
  );
  await sweepTable(
    t,
    t.waiters,
    expired.queue,
    (key, at) => {
      const q = t.waiters.get(key);
      if (q !== undefined && expired.queue(q, at)) t.waiters.remove(key);
    },
    stopped,
    pass,
  );
  await sweepTable(
    t,
    t.idempotency,
    expired.idempotency,
    (key, at) => {
      if (expired.idempotency(t.idempotency.get(key), at)) t.idempotency.remove(key);
    },
    stopped,
    pass,
  );
  // Entries of ended sessions (endSession removes them; this catches leftovers).
  const leftover = (entry: InflightRec[string]) =>
    expired.leftoverEntry(entry, (id) => t.sessions.get(id) !== undefined);
  await sweepTable(
    t,
    t.inflight,
    (entries) => Object.values(entries).some(leftover),
    (key) => {
      const entries = t.inflight.get(key);
      if (entries === undefined) return;
      const rest = Object.fromEntries(Object.entries(entries).filter(([, entry]) => !leftover(entry)));
      if (Object.keys(rest).length > 0) t.inflight.put(key, rest);
      else t.inflight.remove(key);
    },
    stopped,
    pass,
  );
  // Last: a lock whose queue or in-flight entries went above can retire in the same round.
  await sweepTable(
    t,
    t.lockRecords,
    (l, now) => idleRecord(l, now, retentionMs),
    (key, at) => {
      retire(t, key, at, retentionMs);
    },
    stopped,
    pass,
  );
}
