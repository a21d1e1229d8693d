/**
 * Retiring idle lock records (docs/adr/0022-compact-lock-records.md): the embedded store's
 * data file holds the locks in use, not every key ever seen. A lock record is retired
 * (deleted) once it has been idle for the retention (`lockRetentionMs`): no lease, or one
 * that lapsed more than the retention ago; no waiters; no in-flight entries; no write to
 * it for the retention. In the same transaction the namespace's retired floor (meta
 * `retired`) is raised to the highest token the record knew (its floor, issued counter,
 * fence and shadow record), so:
 *
 * - a fenced write for a key without a record and a token at or below the retired floor
 *   is refused `stale` (./fences.ts: it may be an old token of a retired lock), never
 *   admitted;
 * - a key's new record starts its floor at or above the retired floor (./locks.ts), so its
 *   first token is above every token its retired record had: none is issued twice.
 *
 * Housekeeping (./prune.ts) finds the candidates in passes and retires each in a write
 * transaction that checks it again.
 */
import type { Tables } from './db.js';
import { maxBig, retiredFloor } from './locks.js';
import type { StoredLock } from './record.js';

/**
 * The default retention of an idle lock record (settings `lockRetentionMs`): 15 minutes,
 * above the longest lock-delay (an upstream `timeoutMs` of at most 600 s, × 1.25 = 750 s)
 * and the replay window of a grant (MIN_REPLAY_MS, 10 minutes).
 */
export const DEFAULT_LOCK_RETENTION_MS = 900_000;

/** Whether the record alone says it may retire at `now`: no live or recently lapsed lease, no write within the retention. */
export function idleRecord(l: StoredLock, now: number, retentionMs: number): boolean {
  if (l.leaseId !== null && l.expiresAt === null) return false;
  const since = Math.max(l.touched ?? 0, l.expiresAt ?? 0);
  return since + retentionMs <= now;
}

/** Runs inside a write transaction: retires the lock record of `key` if it is still idle. */
export function retire(t: Tables, key: string, now: number, retentionMs: number): boolean {
  const l = t.lockRecords.get(key);
  if (l === undefined || !idleRecord(l, now, retentionMs)) return false;
  if (t.waiters.get(key) !== undefined || t.inflight.get(key) !== undefined) return false;
  let top = maxBig(retiredFloor(t), BigInt(l.floor));
  for (const token of [l.issued, l.highest, l.shadowHighest, l.token]) {
    if (token != null) top = maxBig(top, BigInt(token));
  }
  if (top > retiredFloor(t)) t.meta.put('retired', top.toString());
  void t.lockRecords.remove(key);
  return true;
}
