/**
 * Test-only access to the Redis store's data, bypassing the store: used by the store
 * contract suite to put a key's issued counter where grants alone would take ages to
 * reach (above 2^53, next to 2^63-1).
 */
import { Redis } from 'ioredis';
import { lockKeys } from '../../src/store/redis/keys.js';
import { formatToken } from '../../src/tokens.js';

async function withRedis<T>(url: string, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: false });
  await r.connect();
  try {
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

/**
 * Sets the highest issued token of `key` under `prefix` to `token` (a decimal string in
 * the counter hash). The key's epoch floor is kept when the counter exists, else set to 0,
 * so the next grant mints max(token, global floor) + 1.
 */
export async function seedRedisIssued(
  url: string,
  prefix: string,
  key: string,
  token: bigint,
): Promise<void> {
  const { ctr } = lockKeys(prefix, key);
  await withRedis(url, async (r) => {
    await r.hsetnx(ctr, 'floor', '0');
    await r.hset(ctr, 'issued', formatToken(token));
  });
}

/** Every Redis key under `prefix:` (SCAN MATCH), for assertions on the key layout. */
export async function redisKeysUnder(url: string, prefix: string): Promise<string[]> {
  return withRedis(url, async (r) => {
    const out: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
      out.push(...keys);
      cursor = next;
    } while (cursor !== '0');
    return out.sort();
  });
}

/** Deletes every key under `prefix:` (this test's own keys only; never FLUSHALL). */
export async function dropRedisPrefix(url: string, prefix: string): Promise<void> {
  const keys = await redisKeysUnder(url, prefix);
  if (keys.length === 0) return;
  await withRedis(url, async (r) => {
    for (let i = 0; i < keys.length; i += 500) await r.del(...keys.slice(i, i + 500));
  });
}

/** Runs raw commands for tests (e.g. EVAL of lib.lua snippets, CLUSTER KEYSLOT). */
export async function redisCall(url: string, ...args: [string, ...(string | number)[]]): Promise<unknown> {
  return withRedis(url, (r) => r.call(...args));
}
