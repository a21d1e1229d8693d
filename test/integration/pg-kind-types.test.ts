/**
 * Every type in docs/postgres.md's table, with its modifiers, at the edges, against the
 * real server: written by the gateway and read back; written by psql (plain SQL) and
 * read by the gateway; both digit for digit. A value a column would not hold as sent is
 * refused, naming the column, whoever judges it (the gateway or Postgres). Run with the
 * settings made at connection start and inside each transaction (a transaction pooler),
 * the second time under a connection that asks for other formats.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PostgresRows, RowOutcome } from '../../src/gateway/kinds/postgres/rows.js';
import { pgKindFixture, PG_URL, rowBody, type PgKindFixture } from '../helpers/pg-kind.js';

const COLUMNS = [
  'b',
  'i2',
  'i4',
  'i8',
  'n',
  'n2',
  'r',
  'd',
  'j',
  'jb',
  'ts',
  'ts0',
  'tz',
  'tz3',
  'dt',
  'by',
  'tx',
  'vc',
  'c8',
  'u',
  'bt',
  'vb',
  'ca',
  'na',
  'ia',
  'iv',
  'e',
];

const TABLE = `CREATE TYPE {s}.mood AS ENUM ('calm', 'busy');
  CREATE TABLE {s}.t (
    id bigint PRIMARY KEY,
    b boolean, i2 smallint, i4 integer, i8 bigint, n numeric, n2 numeric(12,2), r real, d double precision,
    j json, jb jsonb, ts timestamp, ts0 timestamp(0), tz timestamptz, tz3 timestamptz(3), dt date, by bytea,
    tx text, vc varchar(5), c8 char(8), u uuid, bt bit(4), vb varbit(6),
    ca char(3)[], na numeric(5,2)[], ia integer[], iv interval, e {s}.mood)`;

/** A row as the gateway answers it: `{"id":…,"b":…}` in column order, each value given as JSON text. */
function rowText(id: string, values: Record<string, string>): string {
  const parts = [`"id":${JSON.stringify(id)}`, ...COLUMNS.map((c) => `"${c}":${values[c] ?? 'null'}`)];
  return `{${parts.join(',')}}`;
}

function text(o: RowOutcome): string {
  if (!o.ok) throw new Error(`refused: ${o.problem.code} ${o.problem.message}`);
  return o.status === 200 ? o.json : '';
}

function refusal(o: RowOutcome): Record<string, unknown> {
  if (o.ok) throw new Error(`expected a refusal, got ${JSON.stringify(o)}`);
  return { status: o.problem.status, code: o.problem.code, ...o.problem.extra };
}

/** Connection-level settings a client (or a pooler's server session) might carry: the kind must not read values in them. */
const OTHER_FORMATS =
  '?options=' +
  encodeURIComponent(
    '-c DateStyle=SQL,DMY -c TimeZone=Asia/Tokyo -c extra_float_digits=-3 -c bytea_output=escape',
  );

describe.each([
  { mode: 'settings at connection start', opts: {}, url: PG_URL },
  {
    mode: 'settings in each transaction',
    opts: { pooler: 'transaction' as const },
    url: PG_URL + OTHER_FORMATS,
  },
])('postgres kind: every type, exact both ways ($mode)', ({ opts, url }) => {
  let f: PgKindFixture;
  let rows: PostgresRows;
  const route = () => f.route('t', 'id', COLUMNS);
  const get = (key: string) => rows.execute(route(), { op: 'get', key });
  const put = (key: string, body: string) =>
    rows.execute(route(), { op: 'put', key, body: rowBody(body), fence: null });

  beforeEach(async () => {
    f = await pgKindFixture();
    await f.sql(TABLE);
    rows = f.rows(url, opts);
  });
  afterEach(async () => f.close());

  it('what the gateway writes reads back as sent, at the edges of each type', async () => {
    const sent: Record<string, string> = {
      b: 'false',
      i2: '-32768',
      i4: '2147483647',
      i8: '"9007199254740993"',
      n: '"12345678901234567890.123456789012345678901234567890"',
      n2: '"-9999999999.99"',
      r: '3.4028235e+38',
      d: '5e-324',
      j: '{"id": 9007199254740993, "f": 0.30000000000000001, "2": [1.10, 1e400], "1": {"k": -0}}',
      jb: '{"id": 9007199254740993, "deep": [[1.10, 2.50e1]]}',
      ts: '"2024-02-29T23:59:59.999999"',
      ts0: '"0045-02-29T00:00:00 BC"',
      tz: '"2024-02-29T12:34:56.123456+00:00"',
      tz3: '"294276-12-31T23:59:59.999+00:00"',
      dt: '"5874897-12-31"',
      by: '"AAEC/f7/"',
      tx: '"héllo \\"quoted\\" \' ; -- \\\\ ✓ 😀"',
      vc: '"😀😀😀😀😀"',
      c8: '"ABCDEFGH"',
      u: '"0e2f1b9a-5c3d-4e6f-8a7b-9c0d1e2f3a4b"',
      bt: '"1010"',
      vb: '"101011"',
      ca: '"{ABC,\\"A B\\"}"',
      na: '"{1.50,NULL,-999.99}"',
      ia: '"{{1,2},{3,4}}"',
      iv: '"1 year 2 mons 3 days 04:05:06.789"',
      e: '"busy"',
    };
    const body = `{${Object.entries(sent)
      .map(([k, v]) => `"${k}":${v}`)
      .join(',')}}`;
    // jsonb keeps numbers as numeric: the same digits, in numeric's own print (2.50e1 → 25.0).
    const want = rowText('1', { ...sent, jb: (sent.jb as string).replace('2.50e1', '25.0') });
    expect(text(await put('1', body))).toBe(want);
    expect(text(await get('1'))).toBe(want);
    // What the database holds, read without the gateway.
    const [held] = await f.sql(
      `SELECT i8::text, n::text, j::text, c8::text, length(c8) AS c8len, bt::text, tz = '2024-02-29 12:34:56.123456Z' AS tz_ok FROM {s}.t`,
    );
    expect(held).toEqual({
      i8: '9007199254740993',
      n: '12345678901234567890.123456789012345678901234567890',
      j: '{"id": 9007199254740993, "f": 0.30000000000000001, "2": [1.10, 1e400], "1": {"k": -0}}',
      c8: 'ABCDEFGH',
      c8len: 8,
      bt: '1010',
      tz_ok: true,
    });

    // JSON numbers where the column holds them exactly; the special floats as strings.
    const numbers =
      '{"i8": 9223372036854775807, "n": 0.30000000000000001, "n2": 1e3, "r": "NaN", "d": "-Infinity", "i2": 1e2, "tz": "2024-02-29T13:34:56+01:00", "c8": "AB", "jb": null}';
    expect(JSON.parse(text(await put('2', numbers)))).toMatchObject({
      i8: '9223372036854775807',
      n: '0.30000000000000001',
      n2: '1000.00',
      r: 'NaN',
      d: '-Infinity',
      i2: 100,
      tz: '2024-02-29T12:34:56+00:00',
      c8: 'AB', // char(8) compares and prints without its padding
      jb: null,
    });
    expect(text(await put('3', '{"d": -0, "r": 1e-45, "by": ""}'))).toContain('"r":1e-45,"d":-0,');
  });

  it('what psql writes, the gateway reads digit for digit', async () => {
    await f.sql(`INSERT INTO {s}.t (id, b, i8, n, n2, r, d, j, jb, ts, ts0, tz, dt, by, c8, bt, vb, ca, na, iv, e)
      VALUES (-9223372036854775808, true, 9007199254740993, 'NaN', 0.5, '-0', '1e-07',
        '{"id":9007199254740993,"x" :[1.10,1E400] }', '{"id": 9007199254740993, "f": 0.30000000000000001}',
        '2024-02-29 12:34:56.5', '2024-02-29 12:34:56.5', '2024-02-29 23:00:00-05', '2024-02-29',
        '\\x00ff', 'AB', B'0101', B'', '{AB,C}', '{0.5}', '-1 day -00:00:01', 'calm')`);
    expect(text(await get('-9223372036854775808'))).toBe(
      rowText('-9223372036854775808', {
        b: 'true',
        i8: '"9007199254740993"',
        n: '"NaN"',
        n2: '"0.50"',
        r: '-0',
        d: '1e-07',
        j: '{"id":9007199254740993,"x" :[1.10,1E400] }',
        jb: '{"f": 0.30000000000000001, "id": 9007199254740993}',
        ts: '"2024-02-29T12:34:56.5"',
        ts0: '"2024-02-29T12:34:57"',
        tz: '"2024-03-01T04:00:00+00:00"',
        dt: '"2024-02-29"',
        by: '"AP8="',
        c8: '"AB"',
        bt: '"0101"',
        vb: '""',
        ca: '"{\\"AB \\",\\"C  \\"}"',
        na: '"{0.50}"',
        iv: '"-1 days -00:00:01"',
        e: '"calm"',
      }),
    );
  });

  it('a domain column: its base type, its modifier and its checks', async () => {
    await f.sql(`CREATE DOMAIN {s}.price AS numeric(5,2) CHECK (VALUE > 0);
      CREATE DOMAIN {s}.code AS char(3);
      CREATE TABLE {s}.dom (id integer PRIMARY KEY, p {s}.price, c {s}.code)`);
    const dom = f.route('dom', 'id', ['p', 'c']);
    const write = (body: string) =>
      rows.execute(dom, { op: 'put', key: '1', body: rowBody(body), fence: null });
    expect(text(await write('{"p": 1.5, "c": "AB"}'))).toBe('{"id":1,"p":"1.50","c":"AB"}');
    expect(refusal(await write('{"p": 1.234}'))).toMatchObject({ status: 400, column: 'p' });
    expect(refusal(await write('{"c": "ABCD"}'))).toMatchObject({ status: 400, column: 'c' }); // never cut to ABC
    expect(refusal(await write('{"p": -1}'))).toMatchObject({ status: 409, code: 'constraint-violation' });
    expect(await f.sql(`SELECT p::text, c::text FROM {s}.dom`)).toEqual([{ p: '1.50', c: 'AB' }]);
  });

  it('refuses a value the column would not hold as sent, naming the column, writing nothing', async () => {
    await put('1', '{"tx": "orig"}');
    const cases: [string, string][] = [
      // judged by the gateway
      ['{"i8": 9223372036854775808}', 'i8'],
      ['{"n2": 19.999}', 'n2'],
      ['{"n2": "12345678901"}', 'n2'],
      ['{"r": 1e39}', 'r'],
      ['{"r": 16777217}', 'r'],
      ['{"d": 0.30000000000000001}', 'd'],
      ['{"d": 9007199254740993}', 'd'],
      ['{"dt": "2024-02-30"}', 'dt'],
      ['{"ts": "2024-02-29T25:00:00"}', 'ts'],
      ['{"ts": "2024-02-29T10:00:00+02:00"}', 'ts'],
      ['{"ts0": "2024-02-29T10:00:00.5"}', 'ts0'],
      ['{"tz3": "2024-02-29T10:00:00.0001Z"}', 'tz3'],
      ['{"dt": "2024-02-29T10:00:00"}', 'dt'],
      ['{"vc": "abcdef"}', 'vc'],
      ['{"c8": "ABCDEFGHI"}', 'c8'],
      ['{"bt": "101"}', 'bt'],
      ['{"vb": "1010101"}', 'vb'],
      ['{"bt": "10a0"}', 'bt'],
      // judged by Postgres (SQLSTATE class 22), the column found by casting each value alone
      ['{"ia": "{1,2"}', 'ia'],
      ['{"na": "{1234.5}"}', 'na'],
      ['{"ca": "{ABCD}"}', 'ca'],
      ['{"e": "happy"}', 'e'],
      ['{"iv": "forever"}', 'iv'],
      ['{"jb": "\\u0000"}', 'jb'],
      ['{"n": "1e140000"}', 'n'],
      ['{"dt": "0000-01-01"}', 'dt'],
    ];
    for (const [body, column] of cases) {
      const p = refusal(await put('1', body));
      expect(p, body).toMatchObject({ status: 400, code: 'invalid-row' });
      expect(p.column, body).toBe(column);
    }
    expect(await f.sql(`SELECT id::text, tx, i8, n2 FROM {s}.t`)).toEqual([
      { id: '1', tx: 'orig', i8: null, n2: null },
    ]);
  });
});
