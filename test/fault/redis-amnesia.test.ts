/**
 * A Redis without persistence restarted empty under a running fencegate: the next
 * token for every key is above every token issued before (a new epoch). That old
 * tokens are then refused at the fence is in the store contract (floors).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startFencegate, startRedis, type FencegateProcess, type RedisProcess } from '../helpers/procs.js';
import { sleep } from '../helpers/wait.js';

let server: FencegateProcess | null = null;
let redis: RedisProcess | null = null;
afterEach(async () => {
  await server?.kill();
  await redis?.stop();
  server = null;
  redis = null;
});

async function acquire(control: string, key: string, owner: string) {
  for (let attempt = 0; attempt < 50; attempt++) {
    const res = await fetch(`${control}/v1/locks/${encodeURIComponent(key)}/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ owner, ttlMs: 200 }),
    }).catch(() => null);
    if (res?.status === 200) return (await res.json()) as { token: string; leaseId: string };
    await sleep(100); // store reconnecting, or the old lease still live
  }
  throw new Error(`could not acquire ${key}`);
}

describe('Redis restarted empty', () => {
  it('starts a new epoch: every later token is above every earlier one', async () => {
    redis = await startRedis({ durable: false });
    server = await startFencegate([
      '--store',
      redis.url,
      '--allow-volatile-redis',
      '--policies',
      'test/fixtures/empty-policy.yaml',
    ]);
    const keys = ['order:1', 'order:2', 'fresh-after'];
    let highestBefore = 0n;
    for (let i = 0; i < 20; i++) {
      const key = keys[i % 2] as string;
      const l = await acquire(server.control, key, 'a');
      highestBefore = BigInt(l.token) > highestBefore ? BigInt(l.token) : highestBefore;
      await fetch(`${server.control}/v1/locks/${encodeURIComponent(key)}/release`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ leaseId: l.leaseId }),
      });
    }
    await redis.restart(); // no AOF, no RDB: it comes back empty
    for (const key of keys) {
      const l = await acquire(server.control, key, 'b');
      expect(BigInt(l.token)).toBeGreaterThan(highestBefore);
    }
    const ready = await fetch(`${server.control}/readyz`);
    expect(ready.status).toBe(200);
  }, 60_000);

  it('refuses to start on a Redis without AOF always unless told', async () => {
    redis = await startRedis({ durable: false });
    await expect(
      startFencegate(['--store', redis.url, '--policies', 'test/fixtures/empty-policy.yaml']),
    ).rejects.toThrow(/appendfsync|--allow-volatile-redis/);
  });

  it('starts on a Redis with AOF appendfsync always', async () => {
    redis = await startRedis({ durable: true });
    server = await startFencegate(['--store', redis.url, '--policies', 'test/fixtures/empty-policy.yaml']);
    const l = await acquire(server.control, 'durable:1', 'a');
    expect(BigInt(l.token)).toBeGreaterThan(0n);
  });
});
