/**
 * The postgres kind behind a real PgBouncer in transaction mode (Debian's package, one
 * started per run on a free port): with `pooler: transaction` it works with every
 * timeout in force — set with SET LOCAL inside each transaction, since the pooler
 * refuses them as startup parameters and hands each transaction to any server session —
 * and a statement past the upstream's timeoutMs is the documented 504. Without it, and
 * with prepared statements the pooler does not keep, the refusal says what is wrong.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RowOutcome } from '../../src/gateway/kinds/postgres/rows.js';
import { startPgBouncer, type PgBouncer } from '../helpers/pgbouncer.js';
import { pgKindFixture, rowBody, type PgKindFixture } from '../helpers/pg-kind.js';

describe('postgres kind behind PgBouncer (transaction mode)', () => {
  let bouncer: PgBouncer;
  let f: PgKindFixture;

  beforeAll(async () => {
    bouncer = await startPgBouncer({ poolSize: 2 });
    f = await pgKindFixture();
    await f.sql(`CREATE TABLE {s}.t (id integer PRIMARY KEY, note text, at timestamptz);
      CREATE FUNCTION {s}.slow() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.note = 'sleep' THEN PERFORM pg_sleep(3); END IF; RETURN NEW; END $$;
      CREATE TRIGGER slow BEFORE INSERT OR UPDATE ON {s}.t FOR EACH ROW EXECUTE FUNCTION {s}.slow();`);
  });
  afterAll(async () => {
    await f?.close();
    await bouncer?.stop();
  });

  const problem = (o: RowOutcome) =>
    o.ok ? o : { status: o.problem.status, code: o.problem.code, ...o.problem.extra };

  it('serves reads and fenced writes; a statement past timeoutMs is 504 and writes nothing', async () => {
    const rows = f.rows(bouncer.url, { pooler: 'transaction', timeoutMs: 300 });
    const route = f.route('t', 'id', ['note', 'at']);
    const put = (key: string, note: string, token: bigint) =>
      rows.execute(route, { op: 'put', key, body: rowBody({ note }), fence: { lock: `t:${key}`, token } });

    expect(problem(await put('1', 'first', 5n))).toMatchObject({ ok: true, status: 200 });
    const slow = await put('1', 'sleep', 6n);
    expect(problem(slow)).toMatchObject({ status: 504, code: 'upstream-timeout' });
    expect(await f.sql(`SELECT note FROM {s}.t`)).toEqual([{ note: 'first' }]);
    expect(await f.sql(`SELECT highest::text FROM {f}.fences`)).toEqual([{ highest: '5' }]);
    expect(problem(await put('1', 'stale', 4n))).toMatchObject({
      status: 409,
      code: 'stale-token',
      highest: '5',
    });

    // Many writers through 2 server sessions: each write one transaction, none lost.
    const many = await Promise.all(Array.from({ length: 30 }, (_, i) => put(String(100 + i), `w${i}`, 1n)));
    expect(many.filter((o) => !o.ok)).toEqual([]);
    expect(await f.sql(`SELECT count(*)::int AS n FROM {s}.t WHERE id >= 100`)).toEqual([{ n: 30 }]);
    const list = await rows.execute(f.route('t', 'id', ['note'], []), { op: 'list', query: 'limit=5' });
    expect(list.ok && list.status === 200 && JSON.parse(list.json)).toHaveLength(5);

    // The settings were made for the transaction only: the pooler's server sessions keep theirs.
    const client = new pg.Client({ connectionString: bouncer.url });
    await client.connect();
    try {
      // Each server session in turn (the pooler hands them round).
      for (let i = 0; i < 4; i++) {
        const shown = await client.query<{ statement_timeout: string }>('SHOW statement_timeout');
        expect(shown.rows[0]?.statement_timeout).toBe('0');
      }
    } finally {
      await client.end();
    }
  });

  it('startup parameters, or prepared statements the pooler does not keep, are refused saying so', async () => {
    const route = f.route('t', 'id', ['note']);
    // Settings at connection start: the pooler refuses the connection (SQLSTATE 08P01).
    const direct = f.rows(bouncer.url, { pooler: 'none' });
    const refused = await direct.execute(route, { op: 'get', key: '1' });
    expect(problem(refused)).toMatchObject({ status: 502, code: 'upstream-unavailable' });
    expect(refused.ok ? '' : refused.problem.message).toContain('pooler: transaction');

    // Prepared statements through PgBouncer 1.18: a server session already has, or lacks,
    // another client's statement (42P05 / 26000), reported as such, never as a bad table.
    const prepared = f.rows(bouncer.url, { pooler: 'transaction', preparedStatements: true, poolSize: 4 });
    const answers: RowOutcome[] = [];
    for (let round = 0; round < 5; round++)
      answers.push(
        ...(await Promise.all(
          Array.from({ length: 8 }, () => prepared.execute(route, { op: 'get', key: '1' })),
        )),
      );
    const clashes = answers.filter((o) => !o.ok);
    expect(clashes.length).toBeGreaterThan(0);
    for (const o of clashes) {
      expect(problem(o)).toMatchObject({ status: 502, code: 'upstream-unavailable' });
      expect(o.ok ? '' : o.problem.message).toMatch(/prepared statement .*(42P05|26000).*pooler/);
    }
  });
});
