/**
 * Lists page with a keyset cursor: each page is ordered by the key, and when there may be
 * more, the answer gives the query of the next page (`after=` the last key, the other
 * parameters kept), so every row of a filtered list can be read, whatever its size,
 * without rows skipped or repeated — also when rows come and go between pages.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PostgresRows, RowOutcome } from '../../src/gateway/kinds/postgres/rows.js';
import { pgKindFixture, type PgKindFixture } from '../helpers/pg-kind.js';

describe('postgres kind: lists page by key', () => {
  let f: PgKindFixture;
  let rows: PostgresRows;

  beforeAll(async () => {
    f = await pgKindFixture();
    rows = f.rows();
    await f.sql(`CREATE TABLE {s}.t (id integer PRIMARY KEY, status text);
      INSERT INTO {s}.t SELECT g, CASE WHEN g % 3 = 0 THEN 'shipped' ELSE 'new' END FROM generate_series(1, 2500) g;
      CREATE TABLE {s}.n (id numeric PRIMARY KEY, tag text);
      INSERT INTO {s}.n VALUES (1.50, 'a'), (2.500, 'a'), (3, 'a'), (10.0, 'a');
      CREATE TABLE {s}.w (id text COLLATE "C" PRIMARY KEY);
      INSERT INTO {s}.w VALUES ('a b'), ('a&b'), ('a+b'), ('a=b'), ('é'), ('😀');`);
  });
  afterAll(async () => f.close());

  const page = (o: RowOutcome): { ids: unknown[]; next?: string } => {
    if (!o.ok || o.status !== 200) throw new Error(`refused: ${JSON.stringify(o)}`);
    return { ids: (JSON.parse(o.json) as { id: unknown }[]).map((r) => r.id), next: o.next };
  };

  /** Follows `next` from `query` to the end; the keys of every page. */
  async function all(
    table: string,
    query: string,
    between?: (n: number) => Promise<void>,
  ): Promise<unknown[][]> {
    const list = f.route(table, 'id', table === 't' ? ['status'] : table === 'n' ? ['tag'] : [], []);
    const pages: unknown[][] = [];
    let q: string | undefined = query;
    while (q !== undefined) {
      const p = page(await rows.execute(list, { op: 'list', query: q }));
      pages.push(p.ids);
      q = p.next;
      await between?.(pages.length);
      if (pages.length > 100) throw new Error('no end');
    }
    return pages;
  }

  it('every row of a filtered list, page by page, beyond the 1000-row limit', async () => {
    const pages = await all('t', 'status=shipped&limit=300');
    expect(pages.map((p) => p.length)).toEqual([300, 300, 233]);
    const shipped = Array.from({ length: 833 }, (_, i) => 3 * (i + 1));
    expect(pages.flat()).toEqual(shipped);
    // The next page keeps the filter and the limit; `after` is the last key.
    expect(
      page(
        await rows.execute(f.route('t', 'id', ['status'], []), {
          op: 'list',
          query: 'status=shipped&limit=2',
        }),
      ).next,
    ).toBe('status=shipped&limit=2&after=6');
    // The whole table (2500 rows) at the largest page.
    expect((await all('t', 'limit=1000')).flat()).toHaveLength(2500);
    // No next page when the last one is exactly full.
    expect(await all('t', 'status=shipped&limit=833')).toEqual([shipped]);
  });

  it('rows written between pages: none skipped or repeated among those present throughout', async () => {
    const pages = await all('t', 'status=new&limit=100&after=2000', async (n) => {
      if (n === 1)
        await f.sql(`INSERT INTO {s}.t VALUES (2501, 'new'), (1999, 'new') ON CONFLICT DO NOTHING`);
    });
    const ids = pages.flat() as number[];
    expect(new Set(ids).size).toBe(ids.length);
    expect(ids).toContain(2501);
    expect(ids).not.toContain(1999); // before the cursor: not this listing's
    expect(ids.filter((i) => i % 3 !== 0 && i <= 2500)).toEqual(
      Array.from({ length: 500 }, (_, i) => 2001 + i).filter((i) => i % 3 !== 0),
    );
  });

  it('the cursor is the key in its canonical spelling, whatever psql stored', async () => {
    // numeric keeps the scale it was given; the next page starts after 2.5, spelled so.
    const pages = await all('n', 'limit=2');
    expect(pages).toEqual([
      ['1.50', '2.500'],
      ['3', '10.0'],
    ]);
    expect(
      page(await rows.execute(f.route('n', 'id', ['tag'], []), { op: 'list', query: 'limit=2' })).next,
    ).toBe('limit=2&after=2.5');
    // Text keys that need escaping in a query string.
    expect((await all('w', 'limit=1')).flat()).toEqual(['a b', 'a&b', 'a+b', 'a=b', 'é', '😀']);
  });

  it('a bad cursor is 400 naming `after`; after is given once', async () => {
    const list = f.route('t', 'id', ['status'], []);
    for (const q of ['after=x', 'after=1e3', 'after=1&after=2', 'after=%FF'])
      expect(await rows.execute(list, { op: 'list', query: q })).toMatchObject({
        ok: false,
        problem: { status: 400, code: 'invalid-row' },
      });
  });
});
