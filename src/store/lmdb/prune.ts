/**
 * Housekeeping of the embedded store: expired idempotency records, queues whose
 * waiters all expired, and in-flight entries whose gateway session has ended (ending a
 * session removes them; this catches leftovers). Reads find candidates outside any
 * transaction; each batch is re-checked and deleted in one write transaction, so
 * housekeeping never holds the write lock for long and never deletes a record that
 * changed meanwhile.
 */
import type { InflightRec, Tables } from './db.js';
import { nowMs } from './db.js';

const BATCH = 500;

async function inBatches<K>(candidates: K[], t: Tables, drop: (key: K, now: number) => void): Promise<void> {
  for (let i = 0; i < candidates.length; i += BATCH) {
    const batch = candidates.slice(i, i + BATCH);
    await t.root.transaction(() => {
      const now = nowMs();
      for (const key of batch) drop(key, now);
    });
  }
}

export async function housekeep(t: Tables, stopped: () => boolean): Promise<void> {
  t.root.resetReadTxn();
  const now = nowMs();
  const grants = [...t.grants.getRange({})].filter((e) => e.value.keepUntil <= now).map((e) => e.key);
  await inBatches(grants, t, (key, at) => {
    const g = t.grants.get(key);
    if (g !== undefined && g.keepUntil <= at) t.grants.remove(key);
  });
  if (stopped()) return;
  const queues = [...t.waiters.getRange({})]
    .filter((e) => e.value.every((w) => w.deadline <= now))
    .map((e) => e.key);
  await inBatches(queues, t, (key, at) => {
    const q = t.waiters.get(key);
    if (q !== undefined && q.every((w) => w.deadline <= at)) t.waiters.remove(key);
  });
  if (stopped()) return;
  // Entries of ended sessions that were not delivering (endSession removes them; this
  // catches leftovers). A delivering one is left to the gateway that watches it for its bound.
  const leftover = ([, session, bound = 0]: InflightRec[string]) =>
    bound === 0 && t.sessions.get(session) === undefined;
  const orphaned = [...t.inflight.getRange({})]
    .filter((e) => Object.values(e.value).some(leftover))
    .map((e) => e.key);
  await inBatches(orphaned, t, (key) => {
    const entries = t.inflight.get(key);
    if (entries === undefined) return;
    const rest = Object.fromEntries(Object.entries(entries).filter(([, entry]) => !leftover(entry)));
    if (Object.keys(rest).length > 0) t.inflight.put(key, rest);
    else t.inflight.remove(key);
  });
}
