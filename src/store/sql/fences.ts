/**
 * The gateway's fence operations on the SQL schema: admit (the compare-and-set of
 * the highest token plus the in-flight entry of the drain barrier, in one
 * transaction with the key's row locked), finish, lowerInflight, and the gateway
 * sessions that own in-flight entries (docs/adr/0005-gateway-sessions.md).
 */
import type { AdmitRequest, AdmitResult, BeatResult, InflightState, SessionRecord } from '../types.js';
import { big, bigOrNull, maxBig, ms, msOrNull, one, tokenParam, type SqlContext } from './context.js';
import type {
  AdmitContextRow,
  LowerInflightRow,
  SessionBeatRow,
  SessionEndRow,
  SessionRow,
} from './queries.js';

type Verdict = { ok: true; highest: bigint } | Extract<AdmitResult, { ok: false }>;

/** The checks, in the documented order, on the key's state read under its row lock. */
export function judge(c: AdmitContextRow | undefined, req: AdmitRequest): Verdict {
  if (c === undefined) return { ok: false, reason: 'forged', highest: null };
  const highest = bigOrNull(c.highest);
  const floor = maxBig(big(c.key_floor), c.epoch_floor === null ? 0n : big(c.epoch_floor));
  if (req.token <= floor) return { ok: false, reason: 'stale', highest };
  if (c.issued === null || req.token > big(c.issued)) return { ok: false, reason: 'forged', highest };
  if (highest !== null && req.token < highest) return { ok: false, reason: 'stale', highest };
  if (req.check === 'lease') {
    const expiresAt = msOrNull(c.expires_at);
    const live = c.lease_id !== null && expiresAt !== null && expiresAt > ms(c.now);
    if (!live || c.lease_token === null || big(c.lease_token) !== req.token) {
      return { ok: false, reason: 'lease-expired', highest };
    }
  }
  return { ok: true, highest: highest === null ? req.token : maxBig(highest, req.token) };
}

export async function admit(ctx: SqlContext, req: AdmitRequest): Promise<AdmitResult> {
  const token = tokenParam(req.token);
  if (!req.record) {
    // Shadow mode: the verdict only; nothing is written, so no lock is needed.
    const c = (await ctx.driver.query<AdmitContextRow>(ctx.q.admit_context, [req.lock, token]))[0];
    const v = judge(c, req);
    return v.ok ? { ok: true, highest: v.highest, lowerInflight: c?.lower_inflight ?? 0 } : v;
  }
  return ctx.driver.transaction(async (tx) => {
    const locked = await tx.query(ctx.q.lock_key, [req.lock]);
    if (locked.length === 0) return { ok: false, reason: 'forged', highest: null };
    const c = one(await tx.query<AdmitContextRow>(ctx.q.admit_context, [req.lock, token]), 'admit_context');
    const v = judge(c, req);
    if (!v.ok) return v;
    await tx.query(ctx.q.admit_record, [req.lock, token, req.requestId, req.session]);
    return { ok: true, highest: v.highest, lowerInflight: c.lower_inflight };
  });
}

export async function finish(ctx: SqlContext, lock: string, requestId: string): Promise<void> {
  await ctx.driver.query(ctx.q.finish, [lock, requestId, ctx.channel]);
}

export async function lowerInflight(ctx: SqlContext, lock: string, token: bigint): Promise<InflightState> {
  const r = one(
    await ctx.driver.query<LowerInflightRow>(ctx.q.lower_inflight, [lock, tokenParam(token)]),
    'lower_inflight',
  );
  return { count: r.count, sessions: r.sessions === '' ? [] : r.sessions.split(' ') };
}

export async function dropInflight(
  ctx: SqlContext,
  lock: string,
  sessions: readonly string[],
): Promise<void> {
  if (sessions.length === 0) return;
  await ctx.driver.query(ctx.q.drop_inflight, [lock, sessions.join(' '), ctx.channel]);
}

export async function openSession(ctx: SqlContext, id: string, ttlMs: number): Promise<void> {
  await ctx.driver.query(ctx.q.session_open, [checkSessionId(id), Math.max(1, Math.ceil(ttlMs))]);
}

export async function beatSession(ctx: SqlContext, id: string): Promise<BeatResult> {
  const r = one(await ctx.driver.query<SessionBeatRow>(ctx.q.session_beat, [id]), 'session_beat');
  return { alive: r.alive > 0, now: ms(r.now) };
}

export async function readSessions(
  ctx: SqlContext,
  ids: readonly string[] | null,
): Promise<Map<string, SessionRecord>> {
  const out = new Map<string, SessionRecord>();
  if (ids !== null && ids.length === 0) return out;
  const rows = await ctx.driver.query<SessionRow>(ctx.q.session_read, [ids === null ? null : ids.join(' ')]);
  for (const r of rows) out.set(r.id, { beat: Number(r.beat), ttlMs: Number(r.ttl_ms) });
  return out;
}

export async function endSession(ctx: SqlContext, id: string, ifBeat: number | null): Promise<boolean> {
  const r = one(
    await ctx.driver.query<SessionEndRow>(ctx.q.session_end, [
      id,
      ifBeat === null ? null : String(ifBeat),
      ctx.channel,
    ]),
    'session_end',
  );
  return r.ended > 0;
}

/** Session ids are listed space-separated in queries: one with a space could never be found. */
function checkSessionId(id: string): string {
  if (id.length === 0 || /\s/.test(id))
    throw new RangeError('a session id must be non-empty, without spaces');
  return id;
}
