/**
 * Opening the Redis store on the shared test Redis (no persistence, so always with
 * allowVolatileRedis) under a random prefix, and removing that prefix afterwards.
 */
import { randomBytes } from 'node:crypto';
import { openRedisStore } from '../../src/store/redis/store.js';
import type { Store } from '../../src/store/types.js';
import { dropRedisPrefix } from './redis-seed.js';

export const SHARED_REDIS_URL = process.env.FENCEGATE_TEST_REDIS ?? 'redis://127.0.0.1:6379';

export const randomPrefix = (): string => `fgt_redis_${randomBytes(6).toString('hex')}`;

export interface OpenedRedisStore {
  store: Store;
  prefix: string;
  url: string;
  close(): Promise<void>;
}

export async function openTestRedisStore(
  url = SHARED_REDIS_URL,
  prefix = randomPrefix(),
): Promise<OpenedRedisStore> {
  const store = await openRedisStore(url, { namespace: prefix, allowVolatileRedis: true });
  return {
    store,
    prefix,
    url,
    async close() {
      await store.close();
      await dropRedisPrefix(url, prefix);
    },
  };
}
