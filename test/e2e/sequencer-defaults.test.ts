/**
 * Where `fencegate serve` finds its sequencer keys when it is not told: on the embedded
 * store a key file made in the store's directory on first start (owner-only) and reused
 * after a restart; on Redis none, said at start, with acquire answers carrying no
 * sequencer and sequencer routes refusing every write; and an explicit file that does
 * not exist stops the start with a clear error.
 */
import { stat, writeFile } from 'node:fs/promises';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropRedisPrefix, expectProblem, randomNamespace, send, SHARED_REDIS } from '../helpers/e2e.js';
import { startUpstream, type TestUpstream } from '../helpers/gateway-harness.js';
import { startFencegate, tempDir } from '../helpers/procs.js';

async function acquire(control: string, key: string) {
  const res = await fetch(`${control}/v1/locks/${encodeURIComponent(key)}/acquire`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ owner: 'w1', ttlMs: 60_000 }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { token: string; sequencer?: string };
}

describe('sequencer keys by default', () => {
  let dir: string;
  let policy: string;
  let upstream: TestUpstream;
  const ns = randomNamespace('fgseq');

  beforeAll(async () => {
    dir = await tempDir('fg-seq-defaults-');
    upstream = await startUpstream();
    policy = join(dir, 'policy.yaml');
    await writeFile(
      policy,
      [
        'version: 1',
        'upstreams:',
        `  orders: { kind: http, url: '${upstream.url}' }`,
        'routes:',
        '  - name: order-writes',
        '    methods: [PUT]',
        '    path: /orders/:id',
        '    upstream: orders',
        "    lock: 'order:{id}'",
        '    fencing: { check: sequencer }',
        '',
      ].join('\n'),
    );
  });

  afterAll(async () => {
    await upstream?.close();
    await dropRedisPrefix(ns);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('embedded store: a key file in the store directory, made once and kept across restarts', async () => {
    const store = join(dir, 'store');
    const first = await startFencegate(['--store', store, '--policies', policy], {}, 180_000);
    let sequencer: string;
    try {
      const file = join(store, 'sequencer-keys.json');
      expect((await stat(file)).mode & 0o777).toBe(0o600);
      expect(first.output()).toContain(`sequencer keys: made ${file}`);
      const g = await acquire(first.control, 'order:1');
      sequencer = g.sequencer ?? '';
      expect(
        (await send(first.data, 'PUT', '/orders/1', { headers: { 'fencing-sequencer': sequencer } })).status,
      ).toBe(200);
    } finally {
      await first.stop();
    }
    const second = await startFencegate(['--store', store, '--policies', policy], {}, 180_000);
    try {
      expect(second.output()).not.toContain('sequencer keys: made');
      // The same key verifies the first run's sequencer (its lease is still live).
      const again = await send(second.data, 'PUT', '/orders/1', {
        headers: { 'fencing-sequencer': sequencer },
      });
      expect(again.status, again.text).toBe(200);
    } finally {
      await second.stop();
    }
  }, 400_000);

  it('Redis without --sequencer-keys: no sequencers, said at start; sequencer routes refuse', async () => {
    const gw = await startFencegate([
      '--store',
      SHARED_REDIS,
      '--allow-volatile-redis',
      '--store-namespace',
      ns,
      '--policies',
      policy,
      '--log-level',
      'info',
    ]);
    try {
      expect(gw.output()).toMatch(/sequencer keys: none \(no --sequencer-keys FILE\)/);
      const g = await acquire(gw.control, 'order:2');
      expect(g.sequencer).toBeUndefined();
      expect(await (await fetch(`${gw.control}/v1/keys`)).json()).toEqual({ keys: [] });
      expectProblem(await send(gw.data, 'PUT', '/orders/2', { token: g.token }), 428, 'sequencer-required');
      const refused = expectProblem(
        await send(gw.data, 'PUT', '/orders/2', { headers: { 'fencing-sequencer': 'a.b' } }),
        403,
        'token-invalid',
      );
      expect(refused.detail).toMatch(/no sequencer keys configured/);
      expect(upstream.hits.filter((h) => h.url === '/orders/2')).toHaveLength(0);
    } finally {
      await gw.stop();
    }
  });

  it('an explicit key file that does not exist stops the start', async () => {
    const missing = join(dir, 'missing.json');
    await expect(
      startFencegate([
        '--store',
        SHARED_REDIS,
        '--allow-volatile-redis',
        '--store-namespace',
        ns,
        '--policies',
        policy,
        '--sequencer-keys',
        missing,
      ]),
    ).rejects.toThrow(/cannot read the sequencer key file \(ENOENT\); make one with: fencegate keys init/);
  });
});
