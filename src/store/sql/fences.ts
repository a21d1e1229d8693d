/**
 * The gateway's fence operations on the SQL schema: admissions and finishes, run in
 * batches by one statement (batcher.ts; the rule is schema.sql's fence_batch_v2: the
 * compare-and-set of the highest token plus the in-flight entry of the drain barrier,
 * with the keys' rows locked), deliver, lowerInflight, and the gateway sessions that own
 * in-flight entries (docs/adr/0005-gateway-sessions.md, 0018-lock-delay.md).
 */
import {
  deliveryBound,
  type AdmitRequest,
  type AdmitResult,
  type BeatResult,
  type InflightState,
  type SessionRecord,
} from '../types.js';
import { withRetries } from './driver.js';
import { big, bigOrNull, ms, one, tokenParam, type SqlContext } from './context.js';
import type {
  DeliverRow,
  FenceBatchRow,
  LowerInflightRow,
  SessionBeatRow,
  SessionEndRow,
  SessionRow,
} from './queries.js';

/** An in-flight entry to remove. */
export interface FinishRequest {
  lock: string;
  requestId: string;
}

/** Prepared-statement name of the batch statement (always the same text per connection). */
const FENCE_BATCH = 'fencegate_fence_batch_v2';

/**
 * Runs `finishes`, then `admissions` as if one after another in array order, in one
 * statement and so one transaction: all of it commits, or none of it (and the
 * StoreUnavailableError reaches every caller). Retried whole on a deadlock or
 * serialization failure. An admission's (lock, requestId) must not repeat in a batch.
 */
export async function runFenceBatch(
  ctx: SqlContext,
  finishes: readonly FinishRequest[],
  admissions: readonly AdmitRequest[],
): Promise<AdmitResult[]> {
  const params = [
    finishes.map((f) => f.lock),
    finishes.map((f) => f.requestId),
    admissions.map((a) => a.lock),
    admissions.map((a) => tokenParam(a.token)),
    admissions.map((a) => (a.check === 'lease' ? 't' : 'f')),
    admissions.map((a) => a.requestId),
    admissions.map((a) => a.session),
    admissions.map((a) => (a.record === 'shadow' ? 's' : a.record ? 't' : 'f')),
    admissions.map((a) => String(deliveryBound(a))),
    ctx.channel,
    ctx.verified.oid,
  ];
  const rows = await withRetries(() =>
    ctx.driver.prepared<FenceBatchRow>(FENCE_BATCH, ctx.q.fence_batch, params),
  );
  if (rows.length !== admissions.length) {
    throw new Error(`fence_batch returned ${rows.length} verdicts for ${admissions.length} admissions`);
  }
  const epoch = rows[0];
  if (epoch !== undefined && epoch.epoch_id !== null && epoch.epoch_floor !== null) {
    ctx.resets.epoch(
      epoch.epoch_id,
      big(epoch.epoch_floor),
      'the epoch changed (bumped, or the store was restored)',
    );
  }
  return rows.map((r) => {
    const highest = bigOrNull(r.highest);
    if (r.verdict !== 'ok') return { ok: false, reason: r.verdict, highest };
    if (highest === null) throw new Error('fence_batch admitted without a highest token');
    ctx.resets.saw(highest);
    return { ok: true, highest, lowerInflight: r.lower_inflight };
  });
}

export async function lowerInflight(ctx: SqlContext, lock: string, token: bigint): Promise<InflightState> {
  const r = one(
    await ctx.driver.query<LowerInflightRow>(ctx.q.lower_inflight, [lock, tokenParam(token)]),
    'lower_inflight',
  );
  if (r.sessions === '') return { count: r.count, sessions: [], bounds: [] };
  return { count: r.count, sessions: r.sessions.split(' '), bounds: r.bounds.split(' ').map(Number) };
}

export async function deliver(
  ctx: SqlContext,
  lock: string,
  requestId: string,
  boundMs: number,
): Promise<boolean> {
  const r = one(
    await ctx.driver.query<DeliverRow>(ctx.q.deliver, [
      lock,
      requestId,
      String(Math.max(0, Math.ceil(boundMs))),
    ]),
    'deliver',
  );
  return r.delivering > 0;
}

export async function dropInflight(
  ctx: SqlContext,
  lock: string,
  sessions: readonly string[],
  maxBoundMs: number,
): Promise<void> {
  if (sessions.length === 0) return;
  const bound = String(Math.max(0, Math.floor(maxBoundMs)));
  await ctx.driver.query(ctx.q.drop_inflight, [lock, sessions.join(' '), ctx.channel, bound]);
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
