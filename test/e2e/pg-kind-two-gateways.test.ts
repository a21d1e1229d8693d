/**
 * kind: postgres through two `fencegate serve` processes on one lock store (the shared
 * Postgres, a schema of its own) in front of one table (another schema, with its own
 * fence schema). Owners of one lock take turns (each new grant a higher token); every
 * owner keeps writing after it was replaced, through either gateway, interleaved with
 * the new owner. An AFTER trigger audits every applied change: tokens never go down,
 * every 200 was applied, no 409 was.
 */
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  acquire,
  dropPostgresSchema,
  expectProblem,
  randomNamespace,
  send,
  SHARED_POSTGRES,
  type Grant,
} from '../helpers/e2e.js';
import { startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { withPgClient } from '../helpers/sql-fixtures.js';
import { sleep } from '../helpers/wait.js';

describe('kind: postgres behind two gateway processes', () => {
  const storeSchema = randomNamespace();
  const table = randomNamespace('fgkind');
  const fences = randomNamespace('fgfence');
  let dir: string;
  let gw: FencegateProcess[] = [];
  const sql = (text: string) =>
    withPgClient(
      SHARED_POSTGRES,
      async (c) => (await c.query(text.replaceAll('{s}', `"${table}"`))).rows as Record<string, unknown>[],
    );

  beforeAll(async () => {
    await sql(`CREATE SCHEMA {s};
      CREATE TABLE {s}.orders (id bigint PRIMARY KEY, tok bigint NOT NULL, writer text NOT NULL,
        amount numeric(12,2), CONSTRAINT amount_positive CHECK (amount > 0));
      CREATE TABLE {s}.audit (seq bigserial PRIMARY KEY, id bigint, tok bigint, writer text);
      CREATE FUNCTION {s}.audit_fn() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO {s}.audit (id, tok, writer) VALUES (NEW.id, NEW.tok, NEW.writer); RETURN NULL; END $$;
      CREATE TRIGGER audit AFTER INSERT OR UPDATE ON {s}.orders FOR EACH ROW EXECUTE FUNCTION {s}.audit_fn();`);
    dir = await tempDir('fg-pgkind-');
    await mkdir(join(dir, 'policies'));
    await writeFile(
      join(dir, 'policies', 'shop.yaml'),
      [
        'version: 1',
        'upstreams:',
        '  shop:',
        '    kind: postgres',
        '    url: postgres://${PGKIND_USER}@127.0.0.1:5432/test',
        `    fenceSchema: ${fences}`,
        'routes:',
        '  - name: order-rows',
        '    methods: [GET, PUT, PATCH, DELETE]',
        '    path: /tables/orders/:id',
        '    upstream: shop',
        `    table: ${table}.orders`,
        '    key: id',
        '    columns: [tok, writer, amount]',
        "    lock: 'order:{id}'",
        '  - name: order-list',
        '    methods: [GET]',
        '    path: /tables/orders',
        '    upstream: shop',
        `    table: ${table}.orders`,
        '    key: id',
        '    columns: [tok, writer, amount]',
        '',
      ].join('\n'),
    );
    const args = [
      '--store',
      SHARED_POSTGRES,
      '--store-namespace',
      storeSchema,
      '--policies',
      join(dir, 'policies'),
    ];
    gw = [
      await startFencegate(args, { PGKIND_USER: 'postgres' }),
      await startFencegate(args, { PGKIND_USER: 'postgres' }),
    ];
  }, 120_000);

  afterAll(async () => {
    await Promise.all(gw.map((g) => g.stop()));
    await dropPostgresSchema(storeSchema);
    await dropPostgresSchema(table);
    await dropPostgresSchema(fences);
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('serves rows, refuses with the documented codes', async () => {
    const [a, b] = gw as [FencegateProcess, FencegateProcess];
    const g = await acquire(a.control, 'order:1', 'w');
    const ok = await send(a.data, 'PUT', '/tables/orders/1', {
      token: g.token,
      body: { tok: g.token, writer: 'w', amount: '12.50' },
    });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json()).toEqual({ id: '1', tok: g.token, writer: 'w', amount: '12.50' });
    expect((await send(b.data, 'GET', '/tables/orders/1')).json()).toEqual(ok.json());
    expect((await send(b.data, 'GET', '/tables/orders?writer=w&limit=5')).json()).toEqual([ok.json()]);
    expectProblem(
      await send(a.data, 'PUT', '/tables/orders/1', { body: { tok: '1', writer: 'x' } }),
      428,
      'token-required',
    );
    expectProblem(
      await send(a.data, 'PUT', '/tables/orders/1', {
        token: String(BigInt(g.token) + 1000n),
        body: { tok: '1', writer: 'x' },
      }),
      403,
      'token-invalid',
    );
    expect(
      expectProblem(
        await send(a.data, 'PATCH', '/tables/orders/1', { token: g.token, body: { nope: 1 } }),
        400,
        'invalid-row',
      ).column,
    ).toBe('nope');
    expect(
      expectProblem(
        await send(a.data, 'PATCH', '/tables/orders/1', { token: g.token, body: { amount: '-1' } }),
        409,
        'constraint-violation',
      ).constraint,
    ).toBe('amount_positive');
    expectProblem(
      await send(a.data, 'PATCH', '/tables/orders/1', {
        token: g.token,
        body: { writer: 'x'.repeat(2 * 1024 * 1024) },
      }),
      413,
      'payload-too-large',
    );
    expectProblem(await send(a.data, 'GET', '/tables/orders/2'), 404, 'row-not-found');
    expect((await send(b.data, 'DELETE', '/tables/orders/1', { token: g.token })).status).toBe(204);
  });

  it('no stale write is applied, with owners interleaved across both gateways', async () => {
    const ids = ['10', '11'];
    const results: { id: string; writer: string; token: bigint; status: number }[] = [];
    let n = 0;
    await Promise.all(
      ids.map(async (id) => {
        const owners: Grant[] = [];
        const writers: Promise<void>[] = [];
        for (let turn = 0; turn < 6; turn++) {
          // A new owner (the lease is short and is simply taken over when it ends).
          const grant = await acquire(gw[turn % 2]!.control, `order:${id}`, `owner-${turn}`, 300);
          owners.push(grant);
          // Every owner so far writes a few times, through alternating gateways.
          writers.push(
            ...owners.map(async (o, k) => {
              for (let i = 0; i < 4; i++) {
                const writer = `w${n++}`;
                const via = gw[(i + k) % 2]!;
                const res = await send(via.data, i % 2 === 0 ? 'PUT' : 'PATCH', `/tables/orders/${id}`, {
                  token: o.token,
                  body: { tok: o.token, writer },
                });
                results.push({ id, writer, token: BigInt(o.token), status: res.status });
                if (res.status !== 200 && res.status !== 404) expectProblem(res, 409, 'stale-token');
              }
            }),
          );
          await sleep(350);
        }
        await Promise.all(writers);
      }),
    );
    for (const id of ids) {
      const audit = await sql(`SELECT tok::text, writer FROM {s}.audit WHERE id = ${id} ORDER BY seq`);
      const toks = audit.map((r) => BigInt(r.tok as string));
      for (let i = 1; i < toks.length; i++)
        expect(toks[i]! >= toks[i - 1]!, `audit of ${id}: ${toks.join(' ')}`).toBe(true);
      const applied = new Set(results.filter((r) => r.id === id && r.status === 200).map((r) => r.writer));
      expect(new Set(audit.map((r) => r.writer))).toEqual(applied);
      const max = toks.reduce((m, t) => (t > m ? t : m), 0n);
      for (const r of results.filter((x) => x.id === id && x.status === 409))
        expect(r.token < max).toBe(true);
      const [row] = await sql(`SELECT tok::text FROM {s}.orders WHERE id = ${id}`);
      expect(BigInt(row?.tok as string)).toBe(max);
    }
    expect(results.filter((r) => r.status === 409).length).toBeGreaterThan(10);
  }, 120_000);
});
