/**
 * A column's type changed under a running gateway (ALTER TABLE … TYPE, a table made
 * again) is seen before a stale type can round or refuse a value: the very first request
 * after the change is judged by the new type. Each case runs on a runtime whose
 * statements are prepared and already ran on its connection (Postgres refuses them once
 * the table changed), on one whose connection is new (the first run is checked before
 * it commits), and behind a transaction pooler's settings (every statement checked).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PostgresRows, RowOutcome } from '../../src/gateway/kinds/postgres/rows.js';
import { pgKindFixture, rowBody, type PgKindFixture } from '../helpers/pg-kind.js';

type Variant = 'prepared, warm connection' | 'prepared, new connection' | 'transaction pooler';

const VARIANTS: Variant[] = ['prepared, warm connection', 'prepared, new connection', 'transaction pooler'];

describe.each(VARIANTS)('postgres kind: column types follow the table (%s)', (variant) => {
  let f: PgKindFixture;
  let rows: PostgresRows;
  const route = () => f.route('t', 'id', ['small', 'n', 'd', 'ts']);
  const put = (key: string, body: string, token = 0n) =>
    rows.execute(route(), {
      op: 'put',
      key,
      body: rowBody(body),
      fence: token === 0n ? null : { lock: `t:${key}`, token },
    });
  const get = (key: string) => rows.execute(route(), { op: 'get', key });
  const json = (o: RowOutcome): Record<string, unknown> => {
    if (!o.ok) throw new Error(`refused: ${o.problem.code} ${o.problem.message}`);
    return o.status === 200 ? (JSON.parse(o.json) as Record<string, unknown>) : {};
  };
  const refusal = (o: RowOutcome) =>
    o.ok ? o : { status: o.problem.status, column: o.problem.extra.column };

  /** Every statement the cases use, run once so each is prepared on the connection. */
  async function warm(): Promise<void> {
    expect((await put('1', '{"small": 1, "n": "1.25", "d": 0.5, "ts": "2024-01-01T00:00:00.5"}')).ok).toBe(
      true,
    );
    expect(
      (await put('1', '{"small": 1, "n": "1.25", "d": 0.5, "ts": "2024-01-01T00:00:00.5"}', 1n)).ok,
    ).toBe(true);
    expect((await get('1')).ok).toBe(true);
  }

  /** After an ALTER, what the variant says about the runtime's connection. */
  async function afterChange(): Promise<void> {
    if (variant !== 'prepared, new connection') return;
    // The runtime's one connection goes; its next is new, its cached columns stale.
    await f.sql(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'fencegate' AND position($1 in query) > 0`,
      [f.schema],
    );
  }

  beforeEach(async () => {
    f = await pgKindFixture();
    await f.sql(`CREATE TABLE {s}.t (id integer PRIMARY KEY, small smallint, n numeric(12,2), d double precision,
      ts timestamp)`);
    rows = f.rows(
      undefined,
      variant === 'transaction pooler' ? { pooler: 'transaction', poolSize: 1 } : { poolSize: 1 },
    );
    await warm();
  });
  afterEach(async () => f.close());

  it('smallint → bigint: a large value is taken at once, and read exactly', async () => {
    await f.sql(`ALTER TABLE {s}.t ALTER COLUMN small TYPE bigint`);
    await afterChange();
    expect(json(await put('1', '{"small": 9007199254740993}', 2n))).toMatchObject({
      small: '9007199254740993',
    });
    await f.sql(`UPDATE {s}.t SET small = 9007199254740995`);
    expect(json(await get('1'))).toMatchObject({ small: '9007199254740995' });
  });

  it('numeric(12,2) → numeric(12,1), double → real, timestamp → timestamp(0): refused, never rounded', async () => {
    await f.sql(`ALTER TABLE {s}.t ALTER COLUMN n TYPE numeric(12,1), ALTER COLUMN d TYPE real,
      ALTER COLUMN ts TYPE timestamp(0)`);
    await afterChange();
    for (const [body, column] of [
      ['{"n": "1.25"}', 'n'],
      ['{"d": 16777217}', 'd'],
      ['{"ts": "2024-01-01T00:00:00.5"}', 'ts'],
    ]) {
      expect(refusal(await put('1', body as string, 3n)), body).toEqual({ status: 400, column });
      expect(refusal(await put('1', body as string)), body).toEqual({ status: 400, column });
    }
    expect(await f.sql(`SELECT n::text, d::text, ts::text FROM {s}.t`)).toEqual([
      { n: '1.3', d: '0.5', ts: '2024-01-01 00:00:01' }, // the ALTER's own rounding, nothing after
    ]);
    expect(json(await put('1', '{"n": "1.2", "d": 16777216}', 3n))).toMatchObject({ n: '1.2', d: 16777216 });
  });

  it('integer key → text: a key refused by the old type is served by the new one', async () => {
    await f.sql(`ALTER TABLE {s}.t ALTER COLUMN id TYPE text`);
    await afterChange();
    expect(json(await put('007', '{"small": 7}', 4n))).toMatchObject({ id: '007', small: 7 });
    expect(json(await get('007'))).toMatchObject({ id: '007' });
  });

  it('a table dropped and made again with other types', async () => {
    await f.sql(
      `DROP TABLE {s}.t; CREATE TABLE {s}.t (id bigint PRIMARY KEY, small numeric, n text, d text, ts date)`,
    );
    await afterChange();
    expect(json(await put('1', '{"small": 0.1, "n": "x", "d": "y", "ts": "2024-02-29"}', 5n))).toEqual({
      id: '1',
      small: '0.1',
      n: 'x',
      d: 'y',
      ts: '2024-02-29',
    });
  });
});
