/**
 * One row, one spelling, one lock: for every key type, the key's canonical text (what
 * the gateway answers with) is served, and every other spelling of the same row is
 * refused before anything is written, in the path, in a filter and in `after`. A key
 * type whose values have no one spelling (a nondeterministic collation) is refused as a
 * table that does not match the policy.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PostgresRows, RowOutcome } from '../../src/gateway/kinds/postgres/rows.js';
import { pgKindFixture, rowBody, type PgKindFixture } from '../helpers/pg-kind.js';

interface KeyCase {
  type: string;
  /** The canonical spelling, then other spellings of the same value. */
  canonical: string;
  others: string[];
}

const CASES: KeyCase[] = [
  {
    type: 'integer',
    canonical: '1000',
    others: ['1e3', '0x3E8', '+1000', '1000.0', ' 1000', '1000 ', '0b1111101000', '1000.', '01000', '1_000'],
  },
  { type: 'smallint', canonical: '-7', others: ['-07', '-7.0', '-0.7e1', ' -7'] },
  { type: 'bigint', canonical: '9007199254740993', others: ['9007199254740993.0', '+9007199254740993'] },
  { type: 'integer', canonical: '0', others: ['-0', '00', '0e0'] },
  { type: 'numeric', canonical: '1000.5', others: ['1000.50', '1.0005e3', '+1000.5', '01000.5'] },
  { type: 'numeric(10,2)', canonical: '12.50', others: ['12.5', '12.500', '1.25e1'] },
  { type: 'double precision', canonical: '0', others: ['-0', '0.0', '0e5'] },
  { type: 'real', canonical: '1.5', others: ['1.50', '15e-1', '+1.5'] },
  {
    type: 'uuid',
    canonical: '0e2f1b9a-5c3d-4e6f-8a7b-9c0d1e2f3a4b',
    others: [
      '0E2F1B9A-5C3D-4E6F-8A7B-9C0D1E2F3A4B',
      '{0e2f1b9a-5c3d-4e6f-8a7b-9c0d1e2f3a4b}',
      '0e2f1b9a5c3d4e6f8a7b9c0d1e2f3a4b',
      '0e2f1b9a-5c3d-4e6f-8a7b-9c0d1e2f3a4B',
    ],
  },
  { type: 'character(3)', canonical: 'AB', others: ['AB ', 'AB  '] },
  {
    type: 'date',
    canonical: '2024-02-29',
    others: ['2024-2-29', '20240229', '2024-02-29 00:00', 'Feb 29 2024'],
  },
  {
    type: 'timestamptz',
    canonical: '2024-02-29T12:00:00+00:00',
    others: [
      '2024-02-29T12:00:00Z',
      '2024-02-29T13:00:00+01:00',
      '2024-02-29 12:00:00+00',
      '2024-02-29T12:00:00.0+00',
    ],
  },
  {
    type: 'timestamp(0)',
    canonical: '2024-02-29T12:00:00',
    others: ['2024-02-29 12:00:00', '2024-02-29T12:00'],
  },
  { type: 'boolean', canonical: 'true', others: ['t', 'TRUE', 'yes', '1', 'on'] },
  { type: 'bytea', canonical: 'QQ==', others: ['QR==', 'QQ'] },
  { type: 'inet', canonical: '10.0.0.1', others: ['10.0.0.1/32', '010.0.0.1'] },
  { type: 'bit(4)', canonical: '1010', others: ['x0A', 'X0A'] },
  { type: 'integer[]', canonical: '{1,2}', others: ['{ 1,2}', '{1, 2}', '{+1,2}'] },
];

describe('postgres kind: one spelling per key', () => {
  let f: PgKindFixture;
  let rows: PostgresRows;

  beforeAll(async () => {
    f = await pgKindFixture();
    rows = f.rows();
    for (const [i, c] of CASES.entries())
      await f.sql(`CREATE TABLE {s}.k${i} (k ${c.type} PRIMARY KEY, v text)`);
  });
  afterAll(async () => f.close());

  const refused = (o: RowOutcome): Record<string, unknown> => {
    if (o.ok) throw new Error(`served: ${JSON.stringify(o)}`);
    return { status: o.problem.status, code: o.problem.code, ...o.problem.extra };
  };

  it.each(CASES.map((c, i) => [c.type, i] as const))(
    '%s: the canonical key is served; every other spelling of it is refused, writing nothing',
    async (_type, i) => {
      const c = CASES[i] as KeyCase;
      const route = f.route(`k${i}`, 'k', ['v']);
      const list = f.route(`k${i}`, 'k', ['v'], []);
      const fence = (key: string) => ({ lock: `k${i}:${key}`, token: 1n });
      const put = await rows.execute(route, {
        op: 'put',
        key: c.canonical,
        body: rowBody({ v: 'a' }),
        fence: fence(c.canonical),
      });
      expect(put.ok, JSON.stringify(put)).toBe(true);
      // The key the gateway answers with is the canonical spelling, so it can be used as it comes.
      expect(JSON.parse((put as { json: string }).json)).toMatchObject({ k: expect.anything(), v: 'a' });
      expect(String(JSON.parse((put as { json: string }).json).k)).toBe(c.canonical);
      for (const other of c.others) {
        for (const op of [
          { op: 'put' as const, key: other, body: rowBody({ v: 'b' }), fence: fence(other) },
          { op: 'patch' as const, key: other, body: rowBody({ v: 'b' }), fence: fence(other) },
          { op: 'delete' as const, key: other, fence: fence(other) },
          { op: 'get' as const, key: other },
        ])
          expect(refused(await rows.execute(route, op)), `${op.op} ${JSON.stringify(other)}`).toMatchObject({
            status: 400,
            code: 'invalid-row',
            column: 'k',
          });
        const q = (name: string) => `${name}=${encodeURIComponent(other)}`;
        expect(refused(await rows.execute(list, { op: 'list', query: q('k') }))).toMatchObject({
          column: 'k',
        });
        expect(refused(await rows.execute(list, { op: 'list', query: q('after') }))).toMatchObject({
          column: 'after',
        });
      }
      // One row, one lock: the refused spellings wrote nothing and raised no fence.
      expect(await f.sql(`SELECT v FROM {s}.k${i}`)).toEqual([{ v: 'a' }]);
      expect(await f.sql(`SELECT lock FROM {f}.fences WHERE lock LIKE $1`, [`k${i}:%`])).toEqual([
        { lock: `k${i}:${c.canonical}` },
      ]);
      const found = await rows.execute(list, { op: 'list', query: `k=${encodeURIComponent(c.canonical)}` });
      expect(found.ok && JSON.parse(found.status === 200 ? found.json : '[]')).toHaveLength(1);
    },
  );

  it('the key in the body must be the path key; a key with a nondeterministic collation is refused', async () => {
    await f.sql(`CREATE TABLE {s}.b (k bigint PRIMARY KEY, v text)`);
    const route = f.route('b', 'k', ['v']);
    const put = (key: string, body: string) =>
      rows.execute(route, { op: 'put', key, body: rowBody(body), fence: null });
    expect((await put('1000', '{"k": "1000", "v": "a"}')).ok).toBe(true);
    expect((await put('1000', '{"k": 1e3, "v": "a"}')).ok).toBe(true);
    expect(refused(await put('1000', '{"k": "1001", "v": "a"}'))).toMatchObject({ column: 'k' });

    await f.sql(
      `CREATE COLLATION {s}.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
    );
    await f.sql(`CREATE TABLE {s}.ci (k text COLLATE {s}.ci PRIMARY KEY, v text)`);
    const ci = f.route('ci', 'k', ['v']);
    expect(refused(await rows.execute(ci, { op: 'get', key: 'abc' }))).toMatchObject({
      status: 502,
      code: 'upstream-unavailable',
    });
  });
});
