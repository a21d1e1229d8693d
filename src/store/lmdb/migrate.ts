/**
 * The upgrade of a format-1 or format-2 namespace to format 3 (./record.ts), run by the
 * first process that opens it, inside the write transaction that records the new format:
 * each lock's msgpack record and its grant history (the separate `owners` table) become
 * one compact record, and the `owners` table is emptied. One transaction, so a process
 * killed during it leaves the namespace as it was (still format 2), and the next open
 * upgrades it again. Read and written in chunks of keys, so a large namespace is never
 * held in memory at once.
 */
import type { Database, RootDatabase } from 'lmdb';
import { nowMs, type LockRec } from './db.js';
import type { StoredLock } from './record.js';

const CHUNK = 1000;

/** Keys of `db` in order, CHUNK at a time (the callback may write the keys it is given). */
function eachChunk(db: Database<unknown, string>, fn: (keys: string[]) => void): void {
  let start: string | undefined;
  for (;;) {
    const keys = [...db.getKeys(start === undefined ? { limit: CHUNK } : { start, limit: CHUNK + 1 })];
    if (start !== undefined && keys[0] === start) keys.shift();
    if (keys.length === 0) return;
    fn(keys);
    start = keys[keys.length - 1];
  }
}

/** Runs inside a write transaction. Returns the number of lock records rewritten. */
export function migrateToCompact(
  root: RootDatabase,
  namespace: string,
  records: Database<StoredLock, string>,
): number {
  // The same two tables, read as format 2 wrote them (msgpack).
  const locks = root.openDB<LockRec, string>({ name: `${namespace}/locks` });
  const owners = root.openDB<[string, string][], string>({ name: `${namespace}/owners` });
  let n = 0;
  eachChunk(locks as Database<unknown, string>, (keys) => {
    for (const key of keys) {
      const l = locks.get(key);
      if (l === undefined) continue;
      const history = owners.get(key);
      const rec: StoredLock = {
        floor: l.floor,
        issued: l.issued,
        highest: l.highest,
        shadowHighest: l.shadowHighest ?? null,
        leaseId: l.leaseId,
        owner: l.owner,
        token: l.token,
        ttlMs: l.ttlMs,
        expiresAt: l.expiresAt,
        // Idle from the upgrade on: retirement counts the retention from here.
        touched: nowMs(),
      };
      if (history !== undefined && history.length > 0) rec.owners = history;
      void records.put(key, rec);
      n++;
    }
  });
  // The histories now live in the lock records (and one without a lock record had no use).
  eachChunk(owners as Database<unknown, string>, (keys) => {
    for (const key of keys) void owners.remove(key);
  });
  return n;
}
