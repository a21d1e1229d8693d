/**
 * Idempotency records of the Postgres store (Store.beginIdempotent, finishIdempotent,
 * abandonIdempotent): the `idempotency` table (schema.sql), one statement each
 * (queries.sql: idem_begin, idem_finish, idem_abandon) on the store's clock. Responses
 * travel as base64 text, stored as bytea.
 */
import type { IdempotentBegin, IdempotentBeginResult, IdempotentFinish } from '../types.js';
import { one, type SqlContext } from './context.js';
import type { IdemBeginRow, IdemFinishRow } from './queries.js';

/**
 * idem_begin answers no row only when a concurrent begin committed the key after the
 * statement's snapshot: the next run sees it. Bounded, though it takes one more at most.
 */
const BEGIN_RUNS = 5;

export async function begin(ctx: SqlContext, req: IdempotentBegin): Promise<IdempotentBeginResult> {
  const hold = String(Math.max(1, Math.ceil(req.holdMs)));
  for (let run = 0; run < BEGIN_RUNS; run++) {
    const rows = await ctx.driver.query<IdemBeginRow>(ctx.q.idem_begin, [
      req.key,
      req.fingerprint,
      req.attempt,
      hold,
    ]);
    const r = rows[0];
    if (r === undefined) continue;
    switch (r.state) {
      case 'begun':
      case 'mismatch':
        return { state: r.state };
      case 'in-flight':
        return { state: r.state, retryAfterMs: Math.max(1, Number(r.retry_after ?? 1)) };
      case 'done':
        return { state: r.state, response: new Uint8Array(Buffer.from(r.response ?? '', 'base64')) };
    }
  }
  throw new Error(`idem_begin found no row ${BEGIN_RUNS} times in a row`);
}

export async function finish(
  ctx: SqlContext,
  { key, attempt, response, ttlMs }: IdempotentFinish,
): Promise<boolean> {
  const body = Buffer.from(response.buffer, response.byteOffset, response.byteLength).toString('base64');
  const ttl = String(Math.max(1, Math.ceil(ttlMs)));
  const r = one(
    await ctx.driver.query<IdemFinishRow>(ctx.q.idem_finish, [key, attempt, body, ttl]),
    'idem_finish',
  );
  return r.stored > 0;
}

export async function abandon(ctx: SqlContext, key: string, attempt: string): Promise<void> {
  await ctx.driver.query(ctx.q.idem_abandon, [key, attempt]);
}
