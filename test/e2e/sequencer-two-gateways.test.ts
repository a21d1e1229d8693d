/**
 * Sequencers through two `fencegate serve` processes sharing one Postgres store and one
 * key file (made and rotated with `fencegate keys`): a sequencer signed by one process
 * verifies on the other, on an http route and on a postgres-kind route; a bare token is
 * refused; a rotation (add, promote, prune) is picked up by both processes from the file
 * without a restart, old sequencers working until their key is pruned.
 */
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  dropPostgresSchema,
  expectProblem,
  randomNamespace,
  send,
  SHARED_POSTGRES,
  waitFor,
} from '../helpers/e2e.js';
import { startUpstream, type TestUpstream } from '../helpers/gateway-harness.js';
import { runCli, startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { withPgClient } from '../helpers/sql-fixtures.js';

interface Grant {
  key: string;
  leaseId: string;
  token: string;
  sequencer: string;
}

const kidOf = (sequencer: string) =>
  (JSON.parse(Buffer.from(sequencer.split('.')[0] ?? '', 'base64url').toString()) as { kid: string }).kid;

async function acquire(control: string, key: string, owner: string): Promise<Grant> {
  const res = await fetch(`${control}/v1/locks/${encodeURIComponent(key)}/acquire`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ owner, ttlMs: 60_000 }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Grant;
}

async function keysOf(control: string): Promise<string[]> {
  const res = await fetch(`${control}/v1/keys`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { keys: { kid: string }[] }).keys.map((k) => k.kid);
}

describe('sequencers across two gateway processes and a key rotation', () => {
  const storeSchema = randomNamespace();
  const table = randomNamespace('fgkind');
  const fences = randomNamespace('fgfence');
  let dir: string;
  let keyFile: string;
  let upstream: TestUpstream;
  let gw: FencegateProcess[] = [];
  const sql = (text: string) =>
    withPgClient(SHARED_POSTGRES, async (c) => (await c.query(text.replaceAll('{s}', `"${table}"`))).rows);

  beforeAll(async () => {
    await sql(`CREATE SCHEMA {s}; CREATE TABLE {s}.orders (id bigint PRIMARY KEY, writer text NOT NULL);`);
    dir = await tempDir('fg-seq-e2e-');
    keyFile = join(dir, 'sequencer-keys.json');
    const init = await runCli(['keys', 'init', keyFile]);
    expect(init.code, init.stderr).toBe(0);
    upstream = await startUpstream();
    await mkdir(join(dir, 'policies'));
    await writeFile(
      join(dir, 'policies', 'p.yaml'),
      [
        'version: 1',
        'upstreams:',
        `  orders: { kind: http, url: '${upstream.url}' }`,
        '  shop:',
        '    kind: postgres',
        '    url: postgres://postgres@127.0.0.1:5432/test',
        `    fenceSchema: ${fences}`,
        'routes:',
        '  - name: order-writes',
        '    methods: [PUT]',
        '    path: /orders/:id',
        '    upstream: orders',
        "    lock: 'order:{id}'",
        '    fencing: { check: sequencer }',
        '  - name: order-rows',
        '    methods: [GET, PUT]',
        '    path: /tables/orders/:id',
        '    upstream: shop',
        `    table: ${table}.orders`,
        '    key: id',
        '    columns: [writer]',
        "    lock: 'row:{id}'",
        '    fencing: { check: sequencer }',
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
    gw = await Promise.all([
      startFencegate([...args, '--sequencer-keys', keyFile]),
      startFencegate(args, { FENCEGATE_SEQUENCER_KEYS: keyFile }),
    ]);
  }, 180_000);

  afterAll(async () => {
    await Promise.all(gw.map((g) => g.stop()));
    await upstream?.close();
    await dropPostgresSchema(storeSchema);
    await dropPostgresSchema(table);
    await dropPostgresSchema(fences);
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('init makes an owner-only file and never overwrites it; the log never shows a private key', async () => {
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
    const again = await runCli(['keys', 'init', keyFile]);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toMatch(/exists/);
    const promote = await runCli(['keys', 'promote', keyFile]);
    expect(promote.code).toBe(2);
    expect(promote.stderr).toMatch(/no "next" key to promote/);
    const usage = await runCli(['keys', 'rotate', keyFile]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/usage: fencegate keys init FILE/);
    const missing = await runCli(['keys', 'add', join(dir, 'nope.json')]);
    expect(missing.stderr).toMatch(/cannot read the sequencer key file \(ENOENT\)/);
    const d = (JSON.parse(await readFile(keyFile, 'utf8')) as { keys: { d: string }[] }).keys[0]?.d;
    for (const g of gw) expect(g.output()).not.toContain(d);
  });

  it('signed by one process, verified by the other, on an http and a postgres route', async () => {
    const [a, b] = gw as [FencegateProcess, FencegateProcess];
    const g = await acquire(a.control, 'order:1', 'w1');
    const ok = await send(b.data, 'PUT', '/orders/1', { headers: { 'fencing-sequencer': g.sequencer } });
    expect(ok.status, ok.text).toBe(200);
    expect(upstream.hits.at(-1)?.headers['fencing-token']).toBe(g.token);
    expect(upstream.hits.at(-1)?.headers['fencing-sequencer']).toBeUndefined();
    expectProblem(await send(b.data, 'PUT', '/orders/1', { token: g.token }), 428, 'sequencer-required');

    const r = await acquire(b.control, 'row:7', 'w1');
    const row = await send(a.data, 'PUT', '/tables/orders/7', {
      headers: { 'fencing-sequencer': r.sequencer },
      body: { writer: 'w1' },
    });
    expect(row.status, row.text).toBe(200);
    expectProblem(
      await send(a.data, 'PUT', '/tables/orders/7', { token: r.token, body: { writer: 'x' } }),
      428,
      'sequencer-required',
    );
    expectProblem(
      await send(a.data, 'PUT', '/tables/orders/7', {
        headers: { 'fencing-sequencer': g.sequencer },
        body: { writer: 'x' },
      }),
      403,
      'token-invalid',
    );
    expect(await sql('SELECT id::text, writer FROM {s}.orders')).toEqual([{ id: '7', writer: 'w1' }]);
  });

  it('rotation without a restart: add, promote, prune', async () => {
    const [a, b] = gw as [FencegateProcess, FencegateProcess];
    const old = await acquire(a.control, 'order:2', 'w1');
    const oldKid = kidOf(old.sequencer);

    const added = await runCli(['keys', 'add', keyFile]);
    expect(added.code, added.stderr).toBe(0);
    const newKid = /added next key (\S+)/.exec(added.stdout)?.[1] ?? '';
    // Published (both processes follow the file) before anything is signed with it.
    await waitFor('both processes publish the next key', async () =>
      (await Promise.all(gw.map((g) => keysOf(g.control)))).every((k) => k.includes(newKid)),
    );
    expect(kidOf((await acquire(a.control, 'order:3', 'w1')).sequencer)).toBe(oldKid);

    const promoted = await runCli(['keys', 'promote', keyFile]);
    expect(promoted.code, promoted.stderr).toBe(0);
    await waitFor('process A signs with the new key', async () => {
      const probe = await acquire(a.control, `order:probe-${Math.random()}`, 'w1');
      return kidOf(probe.sequencer) === newKid;
    });
    const rotated = await acquire(a.control, 'order:4', 'w1');
    expect(kidOf(rotated.sequencer)).toBe(newKid);
    // Process B accepts both: the old key is retired, not gone.
    for (const [path, g] of [
      ['/orders/2', old],
      ['/orders/4', rotated],
    ] as const) {
      const res = await send(b.data, 'PUT', path, { headers: { 'fencing-sequencer': g.sequencer } });
      expect(res.status, res.text).toBe(200);
    }

    const pruned = await runCli(['keys', 'prune', keyFile, '--older-than-ms', '0']);
    expect(pruned.code, pruned.stderr).toBe(0);
    expect(pruned.stdout).toContain(oldKid);
    await waitFor('both processes drop the retired key', async () =>
      (await Promise.all(gw.map((g) => keysOf(g.control)))).every((k) => k.length === 1 && k[0] === newKid),
    );
    expectProblem(
      await send(b.data, 'PUT', '/orders/2', { headers: { 'fencing-sequencer': old.sequencer } }),
      403,
      'token-invalid',
    );
    const still = await send(b.data, 'PUT', '/orders/4', {
      headers: { 'fencing-sequencer': rotated.sequencer },
    });
    expect(still.status, still.text).toBe(200);
  });
});
