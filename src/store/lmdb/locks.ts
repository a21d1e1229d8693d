/**
 * The lock issuer's operations on the embedded store's records: acquire (with
 * idempotent replay and the FIFO waiter queue), renew, release, inspect, waiters,
 * listLocks, recentGrants. Semantics are those documented in src/store/types.ts and
 * follow the SQL store's statements (src/store/sql/queries.sql) step for step.
 *
 * The functions that write run inside one LMDB write transaction (the caller's
 * `root.transaction`), which every process of the directory serialises: reads and
 * writes of a key's records in one call are atomic, as the SQL store's row lock.
 */
import { randomUUID } from 'node:crypto';
import { MAX_TOKEN } from '../../tokens.js';
import {
  GRANT_HISTORY,
  MIN_REPLAY_MS,
  type AcquireRequest,
  type AcquireResult,
  type GrantRecord,
  type ListLocksQuery,
  type LockPage,
  type LockState,
  type ReleaseResult,
  type RenewResult,
} from '../types.js';
import type { LockRec, RecordTables as Tables, WaiterRec } from './db.js';

/** Durations are whole ms; a fractional ms is truncated, never an error. */
export function wholeMs(value: number): number {
  return Number.isFinite(value) ? Math.max(0, Math.trunc(value)) : 0;
}

export function maxBig(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

export function epochFloor(t: Tables): bigint {
  const e = t.meta.get('epoch') as { floor: string } | undefined;
  return e === undefined ? 0n : BigInt(e.floor);
}

/**
 * The namespace's retired floor: at or above every token of every lock record retired
 * (deleted when idle: ./retire.ts). 0 while none was.
 */
export function retiredFloor(t: Tables): bigint {
  const r = t.meta.get('retired') as string | undefined;
  return r === undefined ? 0n : BigInt(r);
}

/**
 * A new key's record: its floor is the store clock × 1000, as in the SQL store, and above
 * the retired floor: a key whose record was retired starts above every token it had.
 */
function newLock(t: Tables, now: number): LockRec {
  return {
    floor: maxBig(BigInt(now) * 1000n, retiredFloor(t)).toString(),
    issued: null,
    highest: null,
    leaseId: null,
    owner: null,
    token: null,
    ttlMs: null,
    expiresAt: null,
  };
}

/**
 * A lease is live until it expires by the store clock, and while its token is above the
 * global floor: an epoch bump that put it at or below the floor superseded it (its holder
 * is fenced out), so it is neither live, renewed nor replayed.
 */
function leaseLive(t: Tables, l: LockRec, now: number): boolean {
  return (
    l.leaseId !== null &&
    l.expiresAt !== null &&
    l.expiresAt > now &&
    l.token !== null &&
    BigInt(l.token) > epochFloor(t)
  );
}

/** The live waiters of a key, in queue order. */
export function liveWaiters(t: Tables, key: string, now: number): WaiterRec[] {
  return (t.waiters.get(key) ?? []).filter((w) => w.deadline > now);
}

export interface Outcome<R> {
  result: R;
  /** Lock keys whose watchers to wake once the transaction has committed. */
  notify: string[];
}

/** Runs inside a write transaction. */
export function tryAcquire(t: Tables, req: AcquireRequest, now: number): Outcome<AcquireResult> {
  const ttlMs = wholeMs(req.ttlMs);
  const l = t.locks.get(req.key) ?? newLock(t, now);
  const none: string[] = [];

  // A replay of an earlier grant: the lease while it is still the current live lease.
  if (req.requestId !== undefined) {
    const g = t.grants.get([req.key, req.requestId, req.owner]);
    if (g !== undefined && g.keepUntil > now) {
      const current = l.leaseId === g.leaseId && leaseLive(t, l, now);
      if (!current || l.expiresAt === null || l.ttlMs === null) {
        return {
          result: { ok: false, reason: 'replay-ended', leaseId: g.leaseId, token: BigInt(g.token) },
          notify: none,
        };
      }
      return {
        result: {
          ok: true,
          replayed: true,
          tookOverExpired: false,
          lapsed: null,
          lease: {
            key: req.key,
            owner: req.owner,
            leaseId: g.leaseId,
            token: BigInt(g.token),
            expiresAt: l.expiresAt,
            ttlMs: l.ttlMs,
          },
        },
        notify: none,
      };
    }
  }

  // What blocks the attempt: a live lease, or a live waiter ahead of us.
  const waits: number[] = [];
  const live = leaseLive(t, l, now);
  if (live && l.expiresAt !== null) waits.push(l.expiresAt - now);
  const head = liveWaiters(t, req.key, now)[0];
  if (head !== undefined && head.id !== req.waiterId) waits.push(head.deadline - now);
  if (waits.length > 0) {
    return {
      result: {
        ok: false,
        reason: 'held',
        blockedBy: live ? 'lease' : 'queue',
        retryAfterMs: Math.max(1, Math.min(...waits)),
      },
      notify: none,
    };
  }

  const last = maxBig(l.issued === null ? BigInt(l.floor) : BigInt(l.issued), epochFloor(t));
  if (last >= MAX_TOKEN) return { result: { ok: false, reason: 'exhausted' }, notify: none };

  const token = last + 1n;
  const leaseId = req.leaseId ?? randomUUID();
  const tookOverExpired = l.leaseId !== null; // a lease is there, but lapsed and never released
  const lapsed =
    tookOverExpired && l.owner !== null && l.token !== null
      ? { owner: l.owner, token: BigInt(l.token) }
      : null;
  const expiresAt = now + ttlMs;
  t.locks.put(req.key, {
    ...l,
    issued: token.toString(),
    leaseId,
    owner: req.owner,
    token: token.toString(),
    ttlMs,
    expiresAt,
  });
  if (req.requestId !== undefined) {
    t.grants.put([req.key, req.requestId, req.owner], {
      leaseId,
      token: token.toString(),
      ttlMs,
      expiresAt,
      tookOver: tookOverExpired,
      keepUntil: now + Math.max(ttlMs, MIN_REPLAY_MS),
    });
  }
  // The winner leaves the queue; expired waiters go with it.
  const queue = t.waiters.get(req.key);
  if (queue !== undefined) {
    const rest = queue.filter((w) => w.id !== req.waiterId && w.deadline > now);
    if (rest.length > 0) t.waiters.put(req.key, rest);
    else t.waiters.remove(req.key);
  }
  const owners: [string, string][] = [[token.toString(), req.owner], ...(t.owners.get(req.key) ?? [])];
  t.owners.put(req.key, owners.slice(0, GRANT_HISTORY));
  return {
    result: {
      ok: true,
      replayed: false,
      tookOverExpired,
      lapsed,
      lease: { key: req.key, owner: req.owner, leaseId, token, expiresAt, ttlMs },
    },
    // The waiters behind the winner re-read the new lease's expiry.
    notify: [req.key],
  };
}

/** Only the current lease, and only while it is live: a lapsed lease is never resurrected. */
export function renew(t: Tables, key: string, leaseId: string, ttlMs: number, now: number): RenewResult {
  const ttl = wholeMs(ttlMs);
  const l = t.locks.get(key);
  if (
    l === undefined ||
    l.leaseId !== leaseId ||
    !leaseLive(t, l, now) ||
    l.owner === null ||
    l.token === null
  ) {
    return { ok: false, reason: 'lease-lost' };
  }
  const expiresAt = now + ttl;
  t.locks.put(key, { ...l, ttlMs: ttl, expiresAt });
  return { ok: true, lease: { key, owner: l.owner, leaseId, token: BigInt(l.token), expiresAt, ttlMs: ttl } };
}

/** Clears the lease with this id, live or lapsed (not yet replaced). */
export function release(t: Tables, key: string, leaseId: string): Outcome<ReleaseResult> {
  const l = t.locks.get(key);
  if (l === undefined || l.leaseId !== leaseId)
    return { result: { ok: false, reason: 'not-owner' }, notify: [] };
  t.locks.put(key, { ...l, leaseId: null, owner: null, token: null, ttlMs: null, expiresAt: null });
  return { result: { ok: true }, notify: [key] };
}

function lockState(t: Tables, key: string, l: LockRec, now: number): LockState | null {
  if (l.issued === null) return null;
  const held = leaseLive(t, l, now) && l.token !== null;
  const issued = BigInt(l.issued);
  return {
    key,
    held,
    owner: held ? l.owner : null,
    leaseId: held ? l.leaseId : null,
    token: held && l.token !== null ? BigInt(l.token) : issued,
    issued,
    expiresAt: held ? l.expiresAt : null,
    waiters: liveWaiters(t, key, now).length,
    highest: l.highest === null ? null : BigInt(l.highest),
    shadowHighest: l.shadowHighest == null ? null : BigInt(l.shadowHighest),
  };
}

export function inspect(t: Tables, key: string, now: number): LockState | null {
  const l = t.locks.get(key);
  return l === undefined ? null : lockState(t, key, l, now);
}

/**
 * Keys with a live lease or live waiters (and a token issued), in byte order, that
 * start with the prefix and come after `after`. A range read of the locks table from
 * the first candidate key; it stops at the page's end or the prefix's end.
 */
export function listLocks(t: Tables, query: ListLocksQuery, now: number): LockPage {
  const n = Math.min(wholeMs(query.limit), 1000);
  const locks: LockState[] = [];
  let next: string | null = null;
  if (n > 0) {
    // Byte order (as LMDB sorts), not JS string order: they differ above U+FFFF.
    const afterPrefix =
      query.after !== null && Buffer.compare(Buffer.from(query.after), Buffer.from(query.prefix)) > 0;
    const start = afterPrefix && query.after !== null ? query.after : query.prefix;
    for (const { key, value } of t.locks.getRange({ start })) {
      if (!key.startsWith(query.prefix)) break;
      if (key === query.after) continue; // the range starts at it
      const s = lockState(t, key, value, now);
      if (s === null || (!s.held && s.waiters === 0)) continue;
      if (locks.length === n) {
        next = locks[locks.length - 1]?.key ?? null;
        break;
      }
      locks.push(s);
    }
  }
  return { locks, next, now };
}

export function recentGrants(t: Tables, key: string): GrantRecord[] {
  return (t.owners.get(key) ?? []).map(([token, owner]) => ({ token: BigInt(token), owner }));
}

/**
 * Runs inside a write transaction. A live waiter that enqueues again keeps its place;
 * an expired one goes to the back. The key's other expired waiters are dropped.
 */
export function enqueueWaiter(t: Tables, key: string, waiterId: string, waitMs: number, now: number): void {
  if (t.locks.get(key) === undefined) t.locks.put(key, newLock(t, now));
  const deadline = now + wholeMs(waitMs);
  const queue = (t.waiters.get(key) ?? []).filter((w) => w.deadline > now || w.id === waiterId);
  const mine = queue.findIndex((w) => w.id === waiterId);
  const entry = queue[mine];
  if (entry !== undefined && entry.deadline > now) queue[mine] = { id: waiterId, deadline };
  else {
    if (mine >= 0) queue.splice(mine, 1);
    queue.push({ id: waiterId, deadline });
  }
  t.waiters.put(key, queue);
}

/** Runs inside a write transaction. */
export function removeWaiter(t: Tables, key: string, waiterId: string): Outcome<void> {
  const queue = t.waiters.get(key);
  if (queue !== undefined) {
    const rest = queue.filter((w) => w.id !== waiterId);
    if (rest.length > 0) t.waiters.put(key, rest);
    else t.waiters.remove(key);
  }
  return { result: undefined, notify: [key] };
}
