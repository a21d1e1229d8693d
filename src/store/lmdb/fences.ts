/**
 * The gateway's fence operations on the embedded store's records: admit (the
 * compare-and-set of the highest token plus the in-flight entry of the drain
 * barrier, in one write transaction), finish, lowerInflight, dropInflight, and the
 * gateway sessions that own in-flight entries (docs/adr/0005-gateway-sessions.md).
 * The checks and their order are the SQL store's (src/store/sql/fences.ts, judge).
 */
import {
  deliveryBound,
  type AdmitRequest,
  type AdmitResult,
  type BeatResult,
  type InflightState,
  type SessionRecord,
} from '../types.js';
import type { InflightRec, LockRec, RecordTables as Tables } from './db.js';
import { epochFloor, maxBig, retiredFloor, type Outcome } from './locks.js';

type Verdict = { ok: true; highest: bigint } | Extract<AdmitResult, { ok: false }>;

/**
 * What an admission is judged against: the higher of the fence and the shadow record, both
 * tokens whose writes reached the upstream (a route switched from shadow mode to enforced
 * starts from what the shadow period admitted; a shadow route sees an enforced one's).
 */
function judgedHighest(l: LockRec): bigint | null {
  const shadow = l.shadowHighest == null ? null : BigInt(l.shadowHighest);
  const fence = l.highest === null ? null : BigInt(l.highest);
  if (fence === null || shadow === null) return fence ?? shadow;
  return maxBig(fence, shadow);
}

function judge(t: Tables, l: LockRec | undefined, req: AdmitRequest, now: number): Verdict {
  // No record: never issued, or retired (./retire.ts), which left every token it had at or below the retired floor.
  if (l === undefined)
    return { ok: false, reason: req.token <= retiredFloor(t) ? 'stale' : 'forged', highest: null };
  const highest = judgedHighest(l);
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

/**
 * In-flight entries of `lock` below `token` that still count: their session exists, or
 * their write was delivering (a bound above 0: it counts on after its session ended,
 * until a gateway drops it). Per session, the largest bound among them.
 */
function lower(t: Tables, entries: InflightRec | undefined, token: bigint): InflightState {
  const bounds = new Map<string, number>();
  let count = 0;
  if (entries !== undefined) {
    const alive = new Map<string, boolean>();
    for (const [entryToken, session, bound = 0] of Object.values(entries)) {
      if (BigInt(entryToken) >= token) continue;
      let live = alive.get(session);
      if (live === undefined) {
        live = t.sessions.get(session) !== undefined;
        alive.set(session, live);
      }
      if (!live && bound === 0) continue;
      count++;
      bounds.set(session, Math.max(bounds.get(session) ?? 0, bound));
    }
  }
  return { count, sessions: [...bounds.keys()], bounds: [...bounds.values()] };
}

/** A kind fenced in the resource (record false): the verdict only, read outside a transaction. */
export function judgeOnly(t: Tables, req: AdmitRequest, now: number): AdmitResult {
  const v = judge(t, t.locks.get(req.lock), req, now);
  return v.ok
    ? { ok: true, highest: v.highest, lowerInflight: lower(t, t.inflight.get(req.lock), req.token).count }
    : v;
}

/**
 * Runs inside a write transaction: checks, then raises the fence and registers the
 * in-flight write (with its delivery bound when nothing lower is in flight), or, for a
 * shadow admission, raises the shadow record alone.
 */
export function admit(t: Tables, req: AdmitRequest, now: number): AdmitResult {
  const l = t.locks.get(req.lock);
  const v = judge(t, l, req, now);
  if (!v.ok) return v;
  if (l === undefined) return { ok: false, reason: 'forged', highest: null };
  const token = req.token.toString();
  if (req.record === 'shadow') {
    if (l.shadowHighest == null || BigInt(l.shadowHighest) < req.token)
      t.locks.put(req.lock, { ...l, shadowHighest: token });
    return { ok: true, highest: v.highest, lowerInflight: 0 };
  }
  const entries = t.inflight.get(req.lock);
  const below = lower(t, entries, req.token).count;
  if (l.highest === null || BigInt(l.highest) < req.token) t.locks.put(req.lock, { ...l, highest: token });
  const bound = below === 0 ? deliveryBound(req) : 0;
  t.inflight.put(req.lock, { ...entries, [req.requestId]: [token, req.session, bound] });
  return { ok: true, highest: v.highest, lowerInflight: below };
}

/** Runs inside a write transaction: marks the entry as delivering; false when it is gone. */
export function deliver(t: Tables, lock: string, requestId: string, boundMs: number): Outcome<boolean> {
  const entries = t.inflight.get(lock);
  const entry = entries?.[requestId];
  if (entries === undefined || entry === undefined) return { result: false, notify: [] };
  const bound = Math.max(0, Math.ceil(boundMs));
  t.inflight.put(lock, { ...entries, [requestId]: [entry[0], entry[1], bound] });
  return { result: true, notify: [] };
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

/** Runs inside a write transaction: removes the lock's entries owned by `sessions` with a bound up to `maxBoundMs`. */
export function dropInflight(
  t: Tables,
  lock: string,
  sessions: readonly string[],
  maxBoundMs: number,
): Outcome<void> {
  const ended = new Set(sessions);
  const dropped = removeEntries(t, lock, (entry) => ended.has(entry[1]) && (entry[2] ?? 0) <= maxBoundMs);
  return { result: undefined, notify: dropped ? [lock] : [] };
}

/** Removes the lock's entries that `which` selects; true when any was removed. */
function removeEntries(t: Tables, lock: string, which: (entry: InflightRec[string]) => boolean): boolean {
  const entries = t.inflight.get(lock);
  if (entries === undefined) return false;
  const rest: InflightRec = {};
  let dropped = 0;
  for (const [id, entry] of Object.entries(entries)) {
    if (which(entry)) dropped++;
    else rest[id] = entry;
  }
  if (dropped === 0) return false;
  if (Object.keys(rest).length > 0) t.inflight.put(lock, rest);
  else t.inflight.remove(lock);
  return true;
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
 * (null: unconditionally) and removes its in-flight entries that were not delivering
 * (a scan of the in-flight table: entries exist only while writes are in flight, so it
 * is short); delivering ones count on until a gateway drops them after their bound.
 */
export function endSession(t: Tables, id: string, ifBeat: number | null): Outcome<boolean> {
  const s = t.sessions.get(id);
  if (s === undefined || (ifBeat !== null && s.beat !== ifBeat)) return { result: false, notify: [] };
  t.sessions.remove(id);
  const notify: string[] = [];
  // Keys first: the table is written while we go.
  for (const key of [...t.inflight.getKeys({})]) {
    if (removeEntries(t, key, (entry) => entry[1] === id && (entry[2] ?? 0) === 0)) notify.push(key);
  }
  return { result: true, notify };
}
