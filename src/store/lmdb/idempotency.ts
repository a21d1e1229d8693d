/**
 * Idempotency records of the embedded store (Store.beginIdempotent, finishIdempotent,
 * abandonIdempotent): one record per key in the `idempotency` table, judged and written
 * inside the store's write transactions, on this machine's clock (the store clock of
 * every process of the directory). Expired records are deleted by housekeeping (prune.ts).
 */
import type { IdempotencyRec, RecordTables as Tables } from './db.js';
import type { IdempotentBegin, IdempotentBeginResult, IdempotentFinish } from '../types.js';
import type { Outcome } from './locks.js';

/** Whether a record counts at `now`: in flight within its hold, or done within its ttl. */
export function live(rec: IdempotencyRec | undefined, now: number): rec is IdempotencyRec {
  return rec !== undefined && rec.until > now;
}

export function begin(t: Tables, req: IdempotentBegin, now: number): Outcome<IdempotentBeginResult> {
  const rec = t.idempotency.get(req.key);
  const none: string[] = [];
  if (!live(rec, now)) {
    const fresh: IdempotencyRec = {
      fingerprint: req.fingerprint,
      attempt: req.attempt,
      until: now + Math.max(1, Math.ceil(req.holdMs)),
      response: null,
    };
    t.idempotency.put(req.key, fresh);
    return { result: { state: 'begun' }, notify: none };
  }
  if (rec.fingerprint !== req.fingerprint) return { result: { state: 'mismatch' }, notify: none };
  if (rec.response === null) {
    return { result: { state: 'in-flight', retryAfterMs: Math.max(1, rec.until - now) }, notify: none };
  }
  return { result: { state: 'done', response: new Uint8Array(rec.response) }, notify: none };
}

/** The record while it is `attempt`'s and in flight (its hold may have passed: nobody took it over). */
function heldBy(t: Tables, key: string, attempt: string): IdempotencyRec | null {
  const rec = t.idempotency.get(key);
  return rec !== undefined && rec.response === null && rec.attempt === attempt ? rec : null;
}

export function finish(
  t: Tables,
  { key, attempt, response, ttlMs }: IdempotentFinish,
  now: number,
): Outcome<boolean> {
  const rec = heldBy(t, key, attempt);
  if (rec === null) return { result: false, notify: [] };
  const done: IdempotencyRec = {
    fingerprint: rec.fingerprint,
    attempt: null,
    until: now + Math.max(1, Math.ceil(ttlMs)),
    response: Buffer.from(response),
  };
  t.idempotency.put(key, done);
  return { result: true, notify: [] };
}

export function abandon(t: Tables, key: string, attempt: string): Outcome<void> {
  if (heldBy(t, key, attempt) !== null) t.idempotency.remove(key);
  return { result: undefined, notify: [] };
}
