/**
 * The lock issuer's operations on the SQL schema: acquire (with idempotent replay
 * and the FIFO waiter queue), renew, release, inspect, waiters, listLocks.
 * Semantics are those documented in src/store/types.ts.
 */
import { randomUUID } from 'node:crypto';
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
import { big, bigOrNull, maxBig, ms, msOrNull, one, type SqlContext } from './context.js';
import type { AcquireContextRow, GrantRow, LockRow, RenewRow } from './queries.js';
import { MAX_TOKEN } from '../../tokens.js';

/** Durations reach SQL as bigint; a fractional ms is truncated, never a cast error. */
function wholeMs(value: number): number {
  return Number.isFinite(value) ? Math.max(0, Math.trunc(value)) : 0;
}

/**
 * The replay of an earlier grant with the same (requestId, owner): the lease while it is
 * still the current live lease (as renewed since), else `replay-ended`. A lease that
 * expired, was released or was replaced is never handed out again as if it were live.
 */
function replayed(req: AcquireRequest, c: AcquireContextRow): AcquireResult | null {
  if (c.replay_lease_id === null || c.replay_token === null) return null;
  const expiresAt = msOrNull(c.expires_at);
  const current =
    c.lease_id === c.replay_lease_id && expiresAt !== null && expiresAt > ms(c.now) && !superseded(c);
  if (!current || expiresAt === null || c.ttl_ms === null) {
    return { ok: false, reason: 'replay-ended', leaseId: c.replay_lease_id, token: big(c.replay_token) };
  }
  return {
    ok: true,
    replayed: true,
    tookOverExpired: false,
    lapsed: null,
    lease: {
      key: req.key,
      owner: req.owner,
      leaseId: c.replay_lease_id,
      token: big(c.replay_token),
      expiresAt,
      ttlMs: ms(c.ttl_ms),
    },
  };
}

/**
 * Why the attempt must wait: what blocks it, and the earliest time the state may change
 * without a notification (the lease's expiry, or the head waiter's deadline, which a live
 * issuer keeps short and renews).
 */
function heldFor(
  req: AcquireRequest,
  c: AcquireContextRow,
): { blockedBy: 'lease' | 'queue'; retryAfterMs: number } | null {
  const now = ms(c.now);
  const expiresAt = msOrNull(c.expires_at);
  const waits: number[] = [];
  const live = c.lease_id !== null && expiresAt !== null && expiresAt > now && !superseded(c);
  if (live) waits.push(expiresAt - now);
  // A live waiter ahead of us: the head of the queue, unless that is us.
  const queued = c.head_waiter_id !== null && c.head_waiter_id !== req.waiterId;
  if (queued) {
    const deadline = msOrNull(c.head_deadline);
    waits.push(deadline === null ? 1 : deadline - now);
  }
  if (waits.length === 0) return null;
  return { blockedBy: live ? 'lease' : 'queue', retryAfterMs: Math.max(1, Math.min(...waits)) };
}

/**
 * The current lease's token is at or below the global floor: an epoch bump superseded it
 * (its holder is fenced out), so it is neither live nor replayed.
 */
function superseded(c: AcquireContextRow): boolean {
  return c.token !== null && c.epoch_floor !== null && big(c.token) <= big(c.epoch_floor);
}

/** The next token would pass 2^63−1 (bigint's maximum): the key can never be granted again. */
function exhausted(c: AcquireContextRow): boolean {
  const last = maxBig(
    c.issued === null ? big(c.key_floor) : big(c.issued),
    c.epoch_floor === null ? 0n : big(c.epoch_floor),
  );
  return last >= MAX_TOKEN;
}

export function tryAcquire(ctx: SqlContext, req: AcquireRequest): Promise<AcquireResult> {
  const ttlMs = wholeMs(req.ttlMs);
  return ctx.driver.transaction(async (tx) => {
    await tx.query(ctx.q.ensure_key, [req.key]);
    const c = one(
      await tx.query<AcquireContextRow>(ctx.q.acquire_context, [
        req.key,
        req.requestId ?? null,
        req.owner,
        ctx.verified.oid,
      ]),
      'acquire_context',
    );
    const replay = replayed(req, c);
    if (replay) return replay;
    const held = heldFor(req, c);
    if (held !== null) return { ok: false, reason: 'held', ...held };
    if (exhausted(c)) return { ok: false, reason: 'exhausted' };

    const leaseId = req.leaseId ?? randomUUID();
    const tookOverExpired = c.lease_id !== null; // a lease is there, but lapsed and never released
    const keepUntil = ms(c.now) + Math.max(ttlMs, MIN_REPLAY_MS);
    const g = one(
      await tx.query<GrantRow>(ctx.q.grant, [
        req.key,
        leaseId,
        req.owner,
        ttlMs,
        c.now,
        req.requestId ?? null,
        req.waiterId ?? null,
        tookOverExpired,
        keepUntil,
        ctx.channel,
        GRANT_HISTORY,
      ]),
      'grant',
    );
    return {
      ok: true,
      replayed: false,
      tookOverExpired,
      lapsed:
        tookOverExpired && c.owner !== null && c.token !== null
          ? { owner: c.owner, token: big(c.token) }
          : null,
      lease: {
        key: req.key,
        owner: req.owner,
        leaseId,
        token: big(g.token),
        expiresAt: ms(g.expires_at),
        ttlMs,
      },
    };
  });
}

export async function renew(
  ctx: SqlContext,
  key: string,
  leaseId: string,
  ttlMs: number,
): Promise<RenewResult> {
  const ttl = wholeMs(ttlMs);
  const rows = await ctx.driver.query<RenewRow>(ctx.q.renew, [key, leaseId, ttl, ctx.verified.oid]);
  const r = rows[0];
  if (r === undefined) return { ok: false, reason: 'lease-lost' };
  return {
    ok: true,
    lease: { key, owner: r.owner, leaseId, token: big(r.token), expiresAt: ms(r.expires_at), ttlMs: ttl },
  };
}

export async function release(ctx: SqlContext, key: string, leaseId: string): Promise<ReleaseResult> {
  const r = one(
    await ctx.driver.query<{ released: number }>(ctx.q.release, [key, leaseId, ctx.channel]),
    'release',
  );
  return r.released > 0 ? { ok: true } : { ok: false, reason: 'not-owner' };
}

function lockState(r: LockRow): LockState | null {
  if (r.issued === null) return null;
  const now = ms(r.now);
  const expiresAt = msOrNull(r.expires_at);
  // A lease whose token an epoch bump put at or below the floor is not held (superseded).
  const held =
    r.lease_id !== null &&
    r.token !== null &&
    expiresAt !== null &&
    expiresAt > now &&
    big(r.token) > big(r.epoch_floor);
  const issued = big(r.issued);
  return {
    key: r.key,
    held,
    owner: held ? r.owner : null,
    leaseId: held ? r.lease_id : null,
    token: held && r.token !== null ? big(r.token) : issued,
    issued,
    expiresAt: held ? expiresAt : null,
    waiters: r.waiters,
    highest: bigOrNull(r.highest),
    shadowHighest: bigOrNull(r.shadow_highest),
  };
}

export async function inspect(ctx: SqlContext, key: string): Promise<LockState | null> {
  const r = (await ctx.driver.query<LockRow>(ctx.q.inspect, [key]))[0];
  return r === undefined ? null : lockState(r);
}

export async function listLocks(ctx: SqlContext, query: ListLocksQuery): Promise<LockPage> {
  const n = Math.min(wholeMs(query.limit), 1000);
  const rows =
    n === 0 ? [] : await ctx.driver.query<LockRow>(ctx.q.list_locks, [n + 1, query.prefix, query.after]);
  const now =
    rows[0] === undefined
      ? ms(one(await ctx.driver.query<{ now: string }>(ctx.q.now), 'now').now)
      : ms(rows[0].now);
  const page = rows.slice(0, n);
  const locks = page.map(lockState).filter((s): s is LockState => s !== null);
  const last = page[page.length - 1];
  return { locks, next: rows.length > n && last !== undefined ? last.key : null, now };
}

export async function recentGrants(ctx: SqlContext, key: string): Promise<GrantRecord[]> {
  const rows = await ctx.driver.query<{ token: string; owner: string }>(ctx.q.recent_grants, [key]);
  return rows.map((r) => ({ token: big(r.token), owner: r.owner }));
}

export function enqueueWaiter(ctx: SqlContext, key: string, waiterId: string, waitMs: number): Promise<void> {
  return ctx.driver.transaction(async (tx) => {
    // Under the key's row lock, so seq order is commit order for this key.
    await tx.query(ctx.q.ensure_key, [key]);
    await tx.query(ctx.q.enqueue_waiter, [key, waiterId, wholeMs(waitMs)]);
  });
}

export async function removeWaiter(ctx: SqlContext, key: string, waiterId: string): Promise<void> {
  await ctx.driver.query(ctx.q.remove_waiter, [key, waiterId, ctx.channel]);
}
