/**
 * Concurrent fenced writers through two separate runtimes (two pools, as two gateway
 * processes would have), with stale and fresh tokens interleaved. An AFTER trigger
 * writes every applied change to an audit table; at the end the audit and the final
 * rows show that no write was applied under a token below one already applied for
 * its lock, that every acknowledged write was applied, and every refused one was not.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PostgresRows, RowOutcome } from '../../src/gateway/kinds/postgres/rows.js';
import { pgKindFixture, rowBody, type PgKindFixture } from '../helpers/pg-kind.js';

interface Attempt {
  id: string;
  writer: string;
  token: bigint;
  outcome: 'applied' | 'stale' | 'other';
}

describe('postgres kind: fenced writers on two runtimes', () => {
  let f: PgKindFixture;
  beforeEach(async () => {
    f = await pgKindFixture();
    await f.sql(`
      CREATE TABLE {s}.orders (id integer PRIMARY KEY, tok bigint NOT NULL, writer text NOT NULL);
      CREATE TABLE {s}.audit (seq bigserial PRIMARY KEY, id integer, tok bigint, writer text, op text);
      CREATE FUNCTION {s}.audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP = 'DELETE' THEN
          INSERT INTO {s}.audit (id, tok, writer, op) VALUES (OLD.id, NULL, NULL, TG_OP);
        ELSE
          INSERT INTO {s}.audit (id, tok, writer, op) VALUES (NEW.id, NEW.tok, NEW.writer, TG_OP);
        END IF;
        RETURN NULL;
      END $$;
      CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON {s}.orders
        FOR EACH ROW EXECUTE FUNCTION {s}.audit_fn();`);
  });
  afterEach(async () => f.close());

  it('no stale write is ever applied, across 2 pools, 3 rows, 600 interleaved writes', async () => {
    const a = f.rows();
    const b = f.rows();
    const route = f.route('orders', 'id', ['tok', 'writer']);
    const attempts: Attempt[] = [];
    let seq = 0;
    const write = async (rows: PostgresRows, id: string, token: bigint): Promise<void> => {
      const writer = `w${seq++}`;
      const op = seq % 7 === 0 ? ('patch' as const) : ('put' as const);
      const out: RowOutcome = await rows.execute(route, {
        op,
        key: id,
        body: rowBody({ tok: token.toString(), writer }),
        fence: { lock: `order:${id}`, token },
      });
      const outcome = out.ok ? 'applied' : out.problem.code === 'stale-token' ? 'stale' : 'other';
      if (!out.ok && out.problem.code !== 'stale-token' && out.problem.code !== 'row-not-found') {
        throw new Error(`unexpected ${out.problem.code}: ${out.problem.message}`);
      }
      attempts.push({ id, writer, token, outcome });
    };
    // Each of 3 rows: a fresh owner's tokens climb; a stale owner keeps writing with
    // tokens a few steps behind; the two run on different pools, all concurrently.
    const rowsIds = ['1', '2', '3'];
    await Promise.all(
      rowsIds.flatMap((id) => [
        (async () => {
          for (let t = 10n; t < 110n; t++) await write(t % 2n === 0n ? a : b, id, t);
        })(),
        (async () => {
          for (let i = 0; i < 100; i++) await write(i % 2 === 0 ? b : a, id, BigInt(5 + Math.floor(i * 0.9)));
        })(),
      ]),
    );

    const audit = await f.sql(`SELECT id::text, tok::text, writer, op FROM {s}.audit ORDER BY seq`);
    const byWriter = new Map(attempts.map((x) => [x.writer, x]));
    for (const id of rowsIds) {
      const applied = audit.filter((r) => r.id === id);
      // Commit order per row (the fence row lock serialises a lock's writes): tokens never go down.
      const toks = applied.map((r) => BigInt(r.tok as string));
      for (let i = 1; i < toks.length; i++) expect(toks[i]! >= toks[i - 1]!).toBe(true);
      // Everything the audit saw was acknowledged as applied, and vice versa.
      for (const r of applied) expect(byWriter.get(r.writer as string)?.outcome).toBe('applied');
      const acked = attempts.filter((x) => x.id === id && x.outcome === 'applied').map((x) => x.writer);
      expect(new Set(applied.map((r) => r.writer))).toEqual(new Set(acked));
      // A refused write was below a token already applied for its lock.
      const maxApplied = toks.reduce((m, t) => (t > m ? t : m), 0n);
      for (const x of attempts.filter((y) => y.id === id && y.outcome === 'stale'))
        expect(x.token < maxApplied).toBe(true);
      expect(maxApplied).toBe(109n);
    }
    const final = await f.sql(`SELECT id::text, tok::text FROM {s}.orders ORDER BY id`);
    expect(final).toEqual(rowsIds.map((id) => ({ id, tok: '109' })));
    const fences = await f.sql(`SELECT lock, highest::text FROM {f}.fences ORDER BY lock`);
    expect(fences).toEqual(rowsIds.map((id) => ({ lock: `order:${id}`, highest: '109' })));
    const stale = attempts.filter((x) => x.outcome === 'stale').length;
    expect(stale).toBeGreaterThan(50); // the stale owner was really interleaved
    expect(attempts.filter((x) => x.outcome === 'applied').length).toBeGreaterThanOrEqual(300);
  });
});
