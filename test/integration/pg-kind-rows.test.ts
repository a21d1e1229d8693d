/**
 * The postgres kind against the real server: every JSON <-> SQL type round-trips, and
 * every refusal is the documented problem and writes nothing.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { PassThrough, Readable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { readJsonBody } from '../../src/gateway/kinds/postgres/body.js';
import type { Checked } from '../../src/gateway/kinds/postgres/row-input.js';
import type { PostgresRows, RowOutcome } from '../../src/gateway/kinds/postgres/rows.js';
import { pgKindFixture, PG_URL, rowBody, type PgKindFixture } from '../helpers/pg-kind.js';
import { withPgClient } from '../helpers/sql-fixtures.js';

const ALL = ['b', 'i2', 'i4', 'i8', 'n', 'r', 'd', 'j', 'jb', 'ts', 'tstz', 'dt', 'by', 'tx', 'vc', 'u'];

function problem(o: RowOutcome | Checked<unknown>): Record<string, unknown> {
  if (o.ok) throw new Error(`expected a refusal, got ${JSON.stringify(o)}`);
  return { status: o.problem.status, code: o.problem.code, ...o.problem.extra };
}

function body(o: RowOutcome): unknown {
  if (!o.ok) throw new Error(`refused: ${o.problem.code} ${o.problem.message}`);
  return o.status === 200 ? JSON.parse(o.json) : undefined;
}

describe('postgres kind: rows', () => {
  let f: PgKindFixture;
  let rows: PostgresRows;
  const route = () => f.route('t', 'id', ALL);
  const put = (key: string, b: Record<string, unknown>) =>
    rows.execute(route(), { op: 'put', key, body: rowBody(b), fence: null });

  beforeEach(async () => {
    f = await pgKindFixture();
    await f.sql(`CREATE TABLE {s}.t (
      id bigint PRIMARY KEY,
      b boolean, i2 smallint, i4 integer, i8 bigint, n numeric(30,10), r real, d double precision,
      j json, jb jsonb, ts timestamp, tstz timestamptz, dt date, by bytea, tx text, vc varchar(5), u uuid,
      CONSTRAINT t_i4_positive CHECK (i4 > 0), CONSTRAINT t_vc_unique UNIQUE (vc))`);
    rows = f.rows();
  });
  afterEach(async () => f.close());

  it('round-trips every type, and null for each', async () => {
    const bytes = randomBytes(300).toString('base64'); // > 57 bytes: base64 lines must be joined
    const uuid = randomUUID();
    const row = {
      id: '9007199254740993', // 2^53 + 1: not representable as a JS number
      b: true,
      i2: -32768,
      i4: 2147483647,
      i8: '-9223372036854775808',
      n: '12345678901234567890.0123456789',
      r: 1.5,
      d: 0.1,
      j: { a: [1, 'x', null], ' k': { nested: true } },
      jb: { b: { c: false }, n: 12.5 },
      ts: '2024-02-29T12:34:56.123456',
      tstz: '2024-02-29T13:34:56.123456+01:00',
      dt: '2024-02-29',
      by: bytes,
      tx: `héllo "quoted" ' ; DROP TABLE t; -- \\ ✓`,
      vc: 'abc',
      u: uuid,
    };
    const stored = body(await put(row.id, row));
    const expected = { ...row, tstz: '2024-02-29T12:34:56.123456+00:00' };
    expect(stored).toEqual(expected);
    expect(body(await rows.execute(route(), { op: 'get', key: row.id }))).toEqual(expected);
    // What the database holds, read without the kind.
    const [raw] = await f.sql(
      `SELECT id::text, i8::text, n::text, encode(by, 'base64') AS by64, tstz = '2024-02-29 12:34:56.123456Z' AS tz_ok FROM {s}.t`,
    );
    expect(raw).toMatchObject({ id: row.id, i8: row.i8, n: row.n, tz_ok: true });
    expect(String(raw?.by64).replace(/\n/g, '')).toBe(bytes);

    const nulls = Object.fromEntries(ALL.map((c) => [c, null]));
    expect(body(await put('2', nulls))).toEqual({ id: '2', ...nulls });
    // Numbers accepted where exact, special floats as strings.
    expect(body(await put('3', { i8: 42, n: 1.25, r: 'NaN', d: '-Infinity', dt: 'infinity' }))).toMatchObject(
      {
        i8: '42',
        n: '1.2500000000',
        r: 'NaN',
        d: '-Infinity',
        dt: 'infinity',
      },
    );
  });

  it('PUT writes only the columns given; PATCH updates; DELETE removes', async () => {
    await f.sql(`ALTER TABLE {s}.t ALTER COLUMN tx SET DEFAULT 'dflt'`);
    expect(body(await put('1', { id: 1, i4: 5 }))).toMatchObject({ id: '1', i4: 5, tx: 'dflt', b: null });
    expect(body(await put('1', { b: false }))).toMatchObject({ i4: 5, b: false, tx: 'dflt' });
    expect(
      body(await rows.execute(route(), { op: 'patch', key: '1', body: rowBody({ tx: 'x' }), fence: null })),
    ).toMatchObject({ i4: 5, tx: 'x' });
    expect(
      problem(
        await rows.execute(route(), { op: 'patch', key: '7', body: rowBody({ tx: 'x' }), fence: null }),
      ),
    ).toMatchObject({ status: 404, code: 'row-not-found' });
    expect(await rows.execute(route(), { op: 'delete', key: '1', fence: null })).toEqual({
      ok: true,
      status: 204,
    });
    expect(problem(await rows.execute(route(), { op: 'delete', key: '1', fence: null }))).toMatchObject({
      status: 404,
      code: 'row-not-found',
    });
    expect(problem(await rows.execute(route(), { op: 'get', key: '1' }))).toMatchObject({
      status: 404,
      code: 'row-not-found',
    });
  });

  it('lists with equality filters and a limit, ordered by key', async () => {
    for (const [id, tx] of [
      ['3', 'a'],
      ['1', 'a'],
      ['2', 'b'],
      ['10', 'a'],
    ])
      await put(id as string, { tx });
    const list = f.route('t', 'id', ['tx', 'i4'], []);
    const ids = (o: RowOutcome) => (body(o) as { id: string }[]).map((r) => r.id);
    expect(ids(await rows.execute(list, { op: 'list', query: 'tx=a' }))).toEqual(['1', '3', '10']);
    expect(ids(await rows.execute(list, { op: 'list', query: 'tx=a&limit=2' }))).toEqual(['1', '3']);
    expect(ids(await rows.execute(list, { op: 'list', query: '' }))).toEqual(['1', '2', '3', '10']);
    expect(problem(await rows.execute(list, { op: 'list', query: 'limit=1001' }))).toMatchObject({
      status: 400,
      code: 'invalid-row',
      column: 'limit',
    });
    expect(problem(await rows.execute(list, { op: 'list', query: 'b=true' }))).toMatchObject({
      status: 400,
      code: 'invalid-row',
      column: 'b',
    });
    expect(problem(await rows.execute(list, { op: 'list', query: 'i4=x' }))).toMatchObject({
      status: 400,
      code: 'invalid-row',
      column: 'i4',
    });
  });

  it('refuses bad input with 400 invalid-row and writes nothing', async () => {
    await put('1', { tx: 'orig', i4: 1 });
    const cases: [string, Record<string, unknown>, string][] = [
      ['1', { nope: 1 }, 'nope'],
      ['1', { i4: '12' }, 'i4'],
      ['1', { i4: 1.5 }, 'i4'],
      ['1', { i2: 40000 }, 'i2'],
      ['1', { i8: '9223372036854775808' }, 'i8'],
      ['1', { i8: 1e300 }, 'i8'],
      ['1', { n: 'abc' }, 'n'],
      ['1', { b: 'true' }, 'b'],
      ['1', { ts: 'yesterday' }, 'ts'],
      ['1', { by: 'not base64!' }, 'by'],
      ['1', { u: 'nope' }, 'u'],
      ['1', { tx: 5 }, 'tx'],
      ['1', { tx: 'a\u0000b' }, 'tx'],
      ['1', { id: '2', tx: 'x' }, 'id'],
      ['x', { tx: 'x' }, 'id'],
    ];
    for (const [key, b, column] of cases) {
      for (const op of ['put', 'patch'] as const) {
        const o = await rows.execute(route(), { op, key, body: rowBody(b), fence: null });
        expect(o.ok, `${op} ${key} ${JSON.stringify(b)}`).toBe(false);
        const p = problem(o);
        expect(p, JSON.stringify(b)).toMatchObject({ status: 400, code: 'invalid-row', column });
      }
    }
    // Values Postgres would refuse (SQLSTATE class 22) are 400 too, never 500, naming the column.
    for (const [b, column] of [
      [{ vc: 'abcdefg' }, 'vc'],
      [{ dt: '2024-02-30' }, 'dt'],
      [{ ts: '2024-13-01T00:00:00' }, 'ts'],
    ] as const) {
      expect(problem(await put('1', b))).toMatchObject({ status: 400, code: 'invalid-row', column });
    }
    expect(await f.sql(`SELECT id::text, tx, i4 FROM {s}.t`)).toEqual([{ id: '1', tx: 'orig', i4: 1 }]);
  });

  it('a constraint violation is 409 naming the constraint, rolled back', async () => {
    await put('1', { vc: 'taken', i4: 1 });
    expect(problem(await put('2', { vc: 'taken' }))).toMatchObject({
      status: 409,
      code: 'constraint-violation',
      constraint: 't_vc_unique',
    });
    expect(problem(await put('1', { i4: -1 }))).toMatchObject({
      status: 409,
      code: 'constraint-violation',
      constraint: 't_i4_positive',
    });
    await f.sql(`ALTER TABLE {s}.t ALTER COLUMN i4 SET NOT NULL`);
    expect(problem(await put('1', { i4: null }))).toMatchObject({
      status: 409,
      code: 'constraint-violation',
      column: 'i4',
    });
    expect(await f.sql(`SELECT id::text, vc, i4 FROM {s}.t`)).toEqual([{ id: '1', vc: 'taken', i4: 1 }]);
  });

  it('a stale token is 409 stale-token with token and highest, rolled back; equal tokens pass', async () => {
    const fenced = (token: bigint, tx: string) =>
      rows.execute(route(), {
        op: 'put',
        key: '1',
        body: rowBody({ tx }),
        fence: { lock: 'order:1', token },
      });
    expect(body(await fenced(41n, 'a'))).toMatchObject({ tx: 'a' });
    expect(body(await fenced(42n, 'b'))).toMatchObject({ tx: 'b' });
    expect(body(await fenced(42n, 'c'))).toMatchObject({ tx: 'c' });
    expect(problem(await fenced(41n, 'stale'))).toMatchObject({
      status: 409,
      code: 'stale-token',
      lock: 'order:1',
      token: '41',
      highest: '42',
    });
    const del = await rows.execute(route(), {
      op: 'delete',
      key: '1',
      fence: { lock: 'order:1', token: 40n },
    });
    expect(problem(del)).toMatchObject({ code: 'stale-token' });
    expect(await f.sql(`SELECT tx FROM {s}.t`)).toEqual([{ tx: 'c' }]);
    expect(await f.sql(`SELECT lock, highest::text FROM {f}.fences`)).toEqual([
      { lock: 'order:1', highest: '42' },
    ]);
    // A refused write under a fresh token does not move the fence either (one transaction).
    expect(
      problem(
        await rows.execute(route(), {
          op: 'put',
          key: '1',
          body: rowBody({ i4: -5 }),
          fence: { lock: 'order:1', token: 50n },
        }),
      ),
    ).toMatchObject({ code: 'constraint-violation' });
    expect(await f.sql(`SELECT highest::text FROM {f}.fences`)).toEqual([{ highest: '42' }]);
  });

  it('an unreachable database is 502 upstream-unavailable; a table unlike the policy too, never 500', async () => {
    const down = f.rows('postgres://postgres@127.0.0.1:1/test');
    expect(problem(await down.execute(route(), { op: 'get', key: '1' }))).toMatchObject({
      status: 502,
      code: 'upstream-unavailable',
      upstream: 'shop',
    });
    expect(
      problem(
        await down.execute(route(), {
          op: 'put',
          key: '1',
          body: rowBody({}),
          fence: { lock: 'l', token: 1n },
        }),
      ),
    ).toMatchObject({ code: 'upstream-unavailable' });
    expect(
      problem(await rows.execute(f.route('missing', 'id', ['tx']), { op: 'get', key: '1' })),
    ).toMatchObject({ status: 502, code: 'upstream-unavailable' });
    expect(problem(await rows.execute(f.route('t', 'id', ['gone']), { op: 'get', key: '1' }))).toMatchObject({
      status: 502,
      code: 'upstream-unavailable',
    });
    // The catalog is read again after an error: a column added later is served.
    await f.sql(`ALTER TABLE {s}.t ADD COLUMN gone text`);
    expect(
      body(
        await rows.execute(f.route('t', 'id', ['gone']), {
          op: 'put',
          key: '1',
          body: rowBody({ gone: 'here' }),
          fence: null,
        }),
      ),
    ).toEqual({ id: '1', gone: 'here' });
  });

  it('prepared statements answer as unnamed ones do, through changes to the table', async () => {
    // The same steps on a table of its own for each runtime: statements prepared once per
    // connection (the default) and statements parsed every time must give the same answers.
    const scenario = async (runtime: PostgresRows, table: string): Promise<unknown[]> => {
      const r = f.route(table, 'id', ['status', 'note']);
      const make = () => f.sql(`CREATE TABLE {s}.${table} (id bigint PRIMARY KEY, status text, note text)`);
      const fence = (token: bigint) => ({ lock: `${table}:1`, token });
      const out: unknown[] = [];
      const step = async (o: Promise<RowOutcome>) => {
        const got = await o;
        out.push(got.ok ? got : { status: got.problem.status, code: got.problem.code });
      };
      await make();
      await step(
        runtime.execute(r, { op: 'put', key: '1', body: rowBody({ status: 'a' }), fence: fence(1n) }),
      );
      await step(
        runtime.execute(r, { op: 'patch', key: '1', body: rowBody({ note: 'n' }), fence: fence(2n) }),
      );
      await step(runtime.execute(r, { op: 'get', key: '1' }));
      await f.sql(`ALTER TABLE {s}.${table} ADD COLUMN extra integer`);
      await step(
        runtime.execute(r, { op: 'put', key: '1', body: rowBody({ status: 'b' }), fence: fence(3n) }),
      );
      await f.sql(`ALTER TABLE {s}.${table} ALTER COLUMN status TYPE varchar(10)`);
      await step(
        runtime.execute(r, { op: 'put', key: '1', body: rowBody({ status: 'c' }), fence: fence(4n) }),
      );
      await step(
        runtime.execute(r, {
          op: 'put',
          key: '1',
          body: rowBody({ status: 'x'.repeat(11) }),
          fence: fence(5n),
        }),
      );
      await f.sql(`DROP TABLE {s}.${table}`);
      await make();
      await step(runtime.execute(r, { op: 'put', key: '2', body: rowBody({ status: 'd' }), fence: null }));
      await step(
        runtime.execute(r, { op: 'put', key: '1', body: rowBody({ status: 'e' }), fence: fence(6n) }),
      );
      await step(
        runtime.execute(r, { op: 'put', key: '1', body: rowBody({ status: 'f' }), fence: fence(1n) }),
      );
      await step(runtime.execute(r, { op: 'delete', key: '2', fence: null }));
      await step(runtime.execute(r, { op: 'get', key: '1' }));
      return out;
    };
    const unnamed = f.rows(undefined, { preparedStatements: false });
    const want = await scenario(unnamed, 'u');
    const got = await scenario(rows, 'p');
    expect(got).toEqual(want);
    expect(got).toEqual([
      { ok: true, status: 200, json: JSON.stringify({ id: '1', status: 'a', note: null }) },
      { ok: true, status: 200, json: JSON.stringify({ id: '1', status: 'a', note: 'n' }) },
      { ok: true, status: 200, json: JSON.stringify({ id: '1', status: 'a', note: 'n' }) },
      { ok: true, status: 200, json: JSON.stringify({ id: '1', status: 'b', note: 'n' }) },
      { ok: true, status: 200, json: JSON.stringify({ id: '1', status: 'c', note: 'n' }) },
      { status: 400, code: 'invalid-row' },
      { ok: true, status: 200, json: JSON.stringify({ id: '2', status: 'd', note: null }) },
      { ok: true, status: 200, json: JSON.stringify({ id: '1', status: 'e', note: null }) },
      { status: 409, code: 'stale-token' },
      { ok: true, status: 204 },
      { ok: true, status: 200, json: JSON.stringify({ id: '1', status: 'e', note: null }) },
    ]);
    expect(unnamed.namedStatements).toBe(0);
    expect(rows.namedStatements).toBeGreaterThan(0);
  });

  it('poolSize bounds the connections; writes beyond it wait their turn', async () => {
    const small = f.rows(undefined, { poolSize: 2 });
    const r = f.route('t', 'id', ['tx']);
    const writes = () =>
      Array.from({ length: 12 }, (_, i) =>
        small.execute(r, {
          op: 'put',
          key: String(i + 1),
          body: rowBody({ tx: `w${i}` }),
          fence: { lock: `pool:${i}`, token: 1n },
        }),
      );
    for (const w of await Promise.all(writes())) expect(w).toMatchObject({ ok: true, status: 200 });
    // Again: each connection's first run of a write ends with its COMMIT (runner.ts); now
    // the write is each backend's last statement.
    for (const w of await Promise.all(writes())) expect(w).toMatchObject({ ok: true, status: 200 });
    expect(await f.sql(`SELECT count(*)::int AS n FROM {s}.t`)).toEqual([{ n: 12 }]);
    // Each backend's last statement named this test's fence schema: the pool's connections.
    const backends = await f.sql(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'fencegate' AND position($1 in query) > 0`,
      [f.fenceSchema],
    );
    expect(backends).toEqual([{ n: 2 }]);
  });

  it('a request that finds no free connection in time is 502 upstream-unavailable, and writes nothing', async () => {
    const one = f.rows(undefined, { poolSize: 1 });
    const r = f.route('t', 'id', ['tx']);
    await f.sql(`INSERT INTO {s}.t (id, tx) VALUES (1, 'before')`);
    // Another session holds row 1: the pool's only connection waits on it.
    await withPgClient(PG_URL, async (blocker) => {
      await blocker.query('BEGIN');
      await blocker.query(`SELECT 1 FROM "${f.schema}".t WHERE id = 1 FOR UPDATE`);
      const held = one.execute(r, { op: 'put', key: '1', body: rowBody({ tx: 'first' }), fence: null });
      const queued = await one.execute(r, {
        op: 'put',
        key: '2',
        body: rowBody({ tx: 'second' }),
        fence: null,
      });
      expect(problem(queued)).toMatchObject({ status: 502, code: 'upstream-unavailable', upstream: 'shop' });
      await blocker.query('COMMIT');
      expect(body(await held)).toMatchObject({ id: '1', tx: 'first' });
    });
    expect(await f.sql(`SELECT id::int, tx FROM {s}.t ORDER BY id`)).toEqual([{ id: 1, tx: 'first' }]);
  });

  it('a body over the limit is 413; too slow is 408; not JSON is 400', async () => {
    const limits = { idleMs: 5000, totalMs: 10_000 };
    const big = Buffer.alloc(2 * 1024 * 1024, 'a');
    expect(problem(await readJsonBody(Readable.from([big]), undefined, limits))).toMatchObject({
      status: 413,
      code: 'payload-too-large',
    });
    expect(problem(await readJsonBody(Readable.from([]), String(big.length), limits))).toMatchObject({
      status: 413,
    });
    expect(
      problem(await readJsonBody(Readable.from([Buffer.from('{"a":')]), undefined, limits)),
    ).toMatchObject({ status: 400, code: 'invalid-row' });
    expect(await readJsonBody(Readable.from([Buffer.from('{"a":1}')]), '7', limits)).toEqual({
      ok: true,
      value: new Map([['a', { kind: 'number', raw: '1' }]]),
    });
    for (const notObject of ['[1,2]', '"text"', 'null', '1', ''])
      expect(
        problem(await readJsonBody(Readable.from([Buffer.from(notObject)]), undefined, limits)),
      ).toMatchObject({ status: 400, code: 'invalid-row' });
    const stalled = new PassThrough();
    stalled.write('{"a":');
    expect(problem(await readJsonBody(stalled, undefined, { idleMs: 100, totalMs: 10_000 }))).toMatchObject({
      status: 408,
      code: 'request-timeout',
    });
  });
});
