/**
 * Test-only access to the Redis store's data on a Redis Cluster, bypassing the store (the
 * cluster counterpart of redis-seed.ts): a plain ioredis Cluster client routes each key to
 * its primary; key removal scans every primary.
 */
import { Cluster } from 'ioredis';
import { parseClusterSpec } from '../../src/store/redis/cluster.js';
import { lockKeys } from '../../src/store/redis/keys.js';
import { formatToken } from '../../src/tokens.js';

export async function withCluster<T>(spec: string, fn: (c: Cluster) => Promise<T>): Promise<T> {
  const parsed = parseClusterSpec(spec);
  if (typeof parsed === 'string') throw new Error(parsed);
  const c = new Cluster(parsed.nodes, { lazyConnect: true, redisOptions: { maxRetriesPerRequest: 1 } });
  c.on('error', () => undefined);
  await c.connect();
  try {
    return await fn(c);
  } finally {
    c.disconnect();
  }
}

/** Sets the highest issued token of `key` under `prefix` (as seedRedisIssued does). */
export async function seedClusterIssued(
  spec: string,
  prefix: string,
  key: string,
  token: bigint,
): Promise<void> {
  const { ctr } = lockKeys(prefix, key);
  await withCluster(spec, async (c) => {
    await c.hsetnx(ctr, 'floor', '0');
    await c.hset(ctr, 'issued', formatToken(token));
  });
}

/** Every key under `prefix:` on every primary. */
export async function clusterKeysUnder(spec: string, prefix: string): Promise<string[]> {
  return withCluster(spec, async (c) => {
    const out: string[] = [];
    for (const node of c.nodes('master')) {
      let cursor = '0';
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
        out.push(...keys);
        cursor = next;
      } while (cursor !== '0');
    }
    return out.sort();
  });
}

/** Deletes every key under `prefix:` (one DEL per key: keys of one call must share a slot). */
export async function deleteClusterPrefix(spec: string, prefix: string): Promise<void> {
  const keys = await clusterKeysUnder(spec, prefix);
  if (keys.length === 0) return;
  await withCluster(spec, async (c) => {
    for (let i = 0; i < keys.length; i += 200) await Promise.all(keys.slice(i, i + 200).map((k) => c.del(k)));
  });
}
