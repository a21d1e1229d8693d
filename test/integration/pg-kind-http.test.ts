/**
 * kind: postgres through a running server (startServer in-process, Redis lock store):
 * two writers spelling one row differently end with one lock, not two; the body's bytes
 * are judged as sent (invalid UTF-8, a lone surrogate); what psql wrote is answered
 * digit for digit; a list's next page is a `Link` header on the JSON array it was.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningServer } from '../../src/serve.js';
import { pgKindFixture, PG_URL, type PgKindFixture } from '../helpers/pg-kind.js';
import { startRedisServerWith, type TestServer } from '../helpers/running-server.js';

describe('kind: postgres over HTTP', () => {
  let f: PgKindFixture;
  let server: TestServer;
  let srv: RunningServer;
  let dir: string;

  beforeAll(async () => {
    f = await pgKindFixture();
    await f.sql(`CREATE TABLE {s}.t (id integer PRIMARY KEY, owner text, meta json)`);
    dir = await mkdtemp(join(tmpdir(), 'fg-pgkind-http-'));
    const policy = join(dir, 'policy.yaml');
    const columns = '[owner, meta]';
    await writeFile(
      policy,
      [
        'version: 1',
        'upstreams:',
        '  shop:',
        '    kind: postgres',
        `    url: ${PG_URL}`,
        `    fenceSchema: ${f.fenceSchema}`,
        'routes:',
        '  - name: rows',
        '    methods: [GET, PUT, PATCH, DELETE]',
        '    path: /tables/t/:id',
        '    upstream: shop',
        `    table: ${f.schema}.t`,
        '    key: id',
        `    columns: ${columns}`,
        "    lock: 'row:{id}'",
        '  - name: list',
        '    methods: [GET]',
        '    path: /tables/t',
        '    upstream: shop',
        `    table: ${f.schema}.t`,
        '    key: id',
        `    columns: ${columns}`,
        '',
      ].join('\n'),
    );
    server = await startRedisServerWith(policy, 'fgpgh');
    srv = server.srv;
  });

  afterAll(async () => {
    await server?.close();
    await f?.close();
    await rm(dir, { recursive: true, force: true });
  });

  async function acquire(lock: string, owner: string): Promise<string> {
    const res = await fetch(`${srv.control}/v1/locks/${encodeURIComponent(lock)}/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ owner, ttlMs: 60_000 }),
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { token: string }).token;
  }

  async function put(path: string, token: string, body: string | Buffer) {
    const res = await fetch(`${srv.data}${path}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', 'fencing-token': token },
      body,
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  }

  it('two writers spelling one row differently: one is refused, and one lock exists', async () => {
    const a = await acquire('row:1000', 'writer-a');
    expect(await put('/tables/t/1000', a, '{"owner":"a"}')).toMatchObject({ status: 200 });
    // B holds a lock of its own, named by its own spelling of row 1000: a genuine token.
    for (const spelling of ['1e3', '%2B1000', '1000.0', '01000', '0x3E8']) {
      const b = await acquire(`row:${decodeURIComponent(spelling)}`, 'writer-b');
      const refused = await put(`/tables/t/${spelling}`, b, '{"owner":"b"}');
      expect(refused, spelling).toMatchObject({
        status: 400,
        body: { type: 'urn:fencegate:invalid-row', column: 'id' },
      });
      if (spelling !== '0x3E8') expect(String(refused.body.detail), spelling).toContain(': "1000"');
    }
    expect(await f.sql(`SELECT id, owner FROM {s}.t`)).toEqual([{ id: 1000, owner: 'a' }]);
    expect(await f.sql(`SELECT lock FROM {f}.fences`)).toEqual([{ lock: 'row:1000' }]);
  });

  it('a body that is not valid UTF-8, or has a lone surrogate, is 400 and writes nothing', async () => {
    const token = await acquire('row:7', 'writer');
    const bad = Buffer.concat([Buffer.from('{"owner":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}')]);
    expect(await put('/tables/t/7', token, bad)).toMatchObject({
      status: 400,
      body: { type: 'urn:fencegate:invalid-row' },
    });
    expect(await put('/tables/t/7', token, '{"owner":"\\udc00"}')).toMatchObject({ status: 400 });
    expect(await put('/tables/t/7', token, '{"meta":{"a":["\\ud800"]}}')).toMatchObject({ status: 400 });
    expect(await f.sql(`SELECT id FROM {s}.t WHERE id = 7`)).toEqual([]);
  });

  it('answers what psql wrote as it is stored, digits and all', async () => {
    await f.sql(`INSERT INTO {s}.t VALUES (8, 'psql', '{"id": 9007199254740993, "f": 0.30000000000000001}')`);
    const res = await fetch(`${srv.data}/tables/t/8`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(
      '{"id":8,"owner":"psql","meta":{"id": 9007199254740993, "f": 0.30000000000000001}}',
    );
  });

  it('a list answers a JSON array and links to its next page', async () => {
    await f.sql(`INSERT INTO {s}.t (id, owner) SELECT g, 'bulk' FROM generate_series(100, 104) g`);
    const ids: unknown[] = [];
    let url: string | null = `${srv.data}/tables/t?owner=bulk&limit=2`;
    const links: string[] = [];
    while (url !== null) {
      const res = await fetch(url);
      expect(res.status).toBe(200);
      const rows = (await res.json()) as { id: number }[];
      expect(Array.isArray(rows)).toBe(true);
      ids.push(...rows.map((r) => r.id));
      const link = res.headers.get('link');
      const next = link === null ? null : /^<([^>]+)>; rel="next"$/.exec(link)?.[1];
      if (link !== null) links.push(link);
      url = next === null || next === undefined ? null : `${srv.data}${next}`;
    }
    expect(ids).toEqual([100, 101, 102, 103, 104]);
    expect(links).toEqual([
      '</tables/t?owner=bulk&limit=2&after=101>; rel="next"',
      '</tables/t?owner=bulk&limit=2&after=103>; rel="next"',
    ]);
  });
});
