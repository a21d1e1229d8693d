/**
 * The gateway's fence operations on the embedded store's records: admit (the
 * compare-and-set of the highest token plus the in-flight entry of the drain
 * barrier, in one write transaction), finish, lowerInflight, dropInflight, and the
 * gateway sessions that own in-flight entries (docs/adr/0005-gateway-sessions.md).
 * The checks and their order are the SQL store's (src/store/sql/fences.ts, judge).
 */
import type { AdmitRequest, AdmitResult, BeatResult, InflightState, SessionRecord } from '../types.js';
import type { InflightRec, LockRec, Tables } from './db.js';
import { epochFloor, maxBig, type Outcome } from './locks.js';

type Verdict = { ok: true; highest: bigint } | Extract<AdmitResult, { ok: false }>;

function judge(t: Tables, l: LockRec | undefined, req: AdmitRequest, now: number): Verdict {
  if (l === undefined) return { ok: false, reason: 'forged', highest: null };
  const highest = l.highest === null ? null : BigInt(l.highest);
  const floor = maxBig(BigInt(l.floor), epochFloor(t));
  if (req.token <= floor) return { ok: false, reason: 'stale', highest };
  if (l.issued === null || req.token > BigInt(l.issued)) return { ok: false, reason: 'forged', highest };
  if (highest !== null && req.token < highest) return { ok: false, reason: 'stale', highest };
  if (req.check === 'lease') {
    const live = l.leaseId !== null && l.expiresAt !== null && l.expiresAt > now;
    if (!live || l.token === null || BigInt(l.token) !== req.token) {
      return { ok: false, reason: 'lease-expired', highest };
    }
  }
  return { ok: true, highest: highest === null ? req.token : maxBig(highest, req.token) };
}

/** In-flight entries of `lock` below `token` whose session still exists. */
function lower(t: Tables, entries: InflightRec | undefined, token: bigint): InflightState {
  const sessions = new Set<string>();
  let count = 0;
  if (entries !== undefined) {
    const alive = new Map<string, boolean>();
    for (const [entryToken, session] of Object.values(entries)) {
      if (BigInt(entryToken) >= token) continue;
      let live = alive.get(session);
      if (live === undefined) {
        live = t.sessions.get(session) !== undefined;
        alive.set(session, live);
      }
      if (!live) continue;
      count++;
      sessions.add(session);
    }
  }
  return { count, sessions: [...sessions] };
}

/** Shadow mode (record false): the verdict only, read outside a transaction. */
export function judgeOnly(t: Tables, req: AdmitRequest, now: number): AdmitResult {
  const v = judge(t, t.locks.get(req.lock), req, now);
  return v.ok
    ? { ok: true, highest: v.highest, lowerInflight: lower(t, t.inflight.get(req.lock), req.token).count }
    : v;
}

/** Runs inside a write transaction: checks, raises the fence and registers the in-flight write. */
export function admit(t: Tables, req: AdmitRequest, now: number): AdmitResult {
  const l = t.locks.get(req.lock);
  const v = judge(t, l, req, now);
  if (!v.ok) return v;
  if (l === undefined) return { ok: false, reason: 'forged', highest: null };
  const entries = t.inflight.get(req.lock);
  const below = lower(t, entries, req.token).count;
  const token = req.token.toString();
  if (l.highest === null || BigInt(l.highest) < req.token) t.locks.put(req.lock, { ...l, highest: token });
  t.inflight.put(req.lock, { ...entries, [req.requestId]: [token, req.session] });
  return { ok: true, highest: v.highest, lowerInflight: below };
}

/** Runs inside a write transaction. */
export function finish(t: Tables, lock: string, requestId: string): Outcome<void> {
  const entries = t.inflight.get(lock);
  if (entries !== undefined && requestId in entries) {
    const rest = { ...entries };
    delete rest[requestId];
    if (Object.keys(rest).length > 0) t.inflight.put(lock, rest);
    else t.inflight.remove(lock);
  }
  return { result: undefined, notify: [lock] };
}

export function lowerInflight(t: Tables, lock: string, token: bigint): InflightState {
  return lower(t, t.inflight.get(lock), token);
}

/** Runs inside a write transaction: removes the lock's entries owned by `sessions`. */
export function dropInflight(t: Tables, lock: string, sessions: readonly string[]): Outcome<void> {
  const entries = t.inflight.get(lock);
  if (entries === undefined) return { result: undefined, notify: [] };
  const ended = new Set(sessions);
  const rest: InflightRec = {};
  let dropped = 0;
  for (const [id, entry] of Object.entries(entries)) {
    if (ended.has(entry[1])) dropped++;
    else rest[id] = entry;
  }
  if (dropped === 0) return { result: undefined, notify: [] };
  if (Object.keys(rest).length > 0) t.inflight.put(lock, rest);
  else t.inflight.remove(lock);
  return { result: undefined, notify: [lock] };
}

/** Session ids are plain tokens (as in the SQL store, which lists them space-separated). */
export function checkSessionId(id: string): string {
  if (id.length === 0 || /\s/.test(id))
    throw new RangeError('a session id must be non-empty, without spaces');
  return id;
}

/** Runs inside a write transaction. */
export function openSession(t: Tables, id: string, ttlMs: number, now: number): void {
  t.sessions.put(checkSessionId(id), { beat: 0, ttlMs: Math.max(1, Math.ceil(ttlMs)), startedAt: now });
}

/** Runs inside a write transaction. */
export function beatSession(t: Tables, id: string, now: number): BeatResult {
  const s = t.sessions.get(id);
  if (s === undefined) return { alive: false, now };
  t.sessions.put(id, { ...s, beat: s.beat + 1 });
  return { alive: true, now };
}

export function readSessions(t: Tables, ids: readonly string[] | null): Map<string, SessionRecord> {
  const out = new Map<string, SessionRecord>();
  if (ids === null) {
    for (const { key, value } of t.sessions.getRange({}))
      out.set(key, { beat: value.beat, ttlMs: value.ttlMs });
    return out;
  }
  for (const id of ids) {
    const s = t.sessions.get(id);
    if (s !== undefined) out.set(id, { beat: s.beat, ttlMs: s.ttlMs });
  }
  return out;
}

/**
 * Runs inside a write transaction. Ends the session if its beat is still `ifBeat`
 * (null: unconditionally) and removes its in-flight entries (a scan of the in-flight
 * table: entries exist only while writes are in flight, so it is short).
 */
export function endSession(t: Tables, id: string, ifBeat: number | null): Outcome<boolean> {
  const s = t.sessions.get(id);
  if (s === undefined || (ifBeat !== null && s.beat !== ifBeat)) return { result: false, notify: [] };
  t.sessions.remove(id);
  const notify: string[] = [];
  // Keys first: the table is written while we go.
  for (const key of [...t.inflight.getKeys({})]) {
    if (dropInflight(t, key, [id]).notify.length > 0) notify.push(key);
  }
  return { result: true, notify };
}
