/**
 * Store backends for fault scenarios. Each returns the `fencegate serve` arguments
 * for the store and a cleanup that removes everything the run left behind:
 *
 * - redis: the shared redis://127.0.0.1:6379 (no AOF, so --allow-volatile-redis) under a
 *   random key prefix, deleted after; or a private durable redis-server (startRedis).
 * - postgres: the shared test database under a random schema, dropped after.
 * - embedded: a fresh directory (several processes may share it), removed after.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { Redis } from 'ioredis';
import pg from 'pg';
import { startRedis, tempDir, type RedisProcess } from '../../helpers/procs.js';

export type StoreKind = 'redis' | 'redis-durable' | 'postgres' | 'embedded';

export const SHARED_REDIS_URL = process.env.FENCEGATE_TEST_REDIS ?? 'redis://127.0.0.1:6379';
export const PG_URL = process.env.FENCEGATE_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface FaultStore {
  kind: StoreKind;
  /** Arguments for `fencegate serve` (store and namespace flags). */
  args: string[];
  /** True when several fencegate processes may share it. */
  shared: boolean;
  /** The embedded store's directory (null for the other stores). */
  dir: string | null;
  cleanup(): Promise<void>;
}

function randomName(prefix: string): string {
  return `${prefix}_${Date.now().toString(36)}_${randomBytes(4).toString('hex')}`;
}

export async function openFaultStore(kind: StoreKind): Promise<FaultStore> {
  switch (kind) {
    case 'redis': {
      const ns = randomName('fgfault');
      return {
        kind,
        shared: true,
        dir: null,
        args: ['--store', SHARED_REDIS_URL, '--allow-volatile-redis', '--store-namespace', ns],
        cleanup: () => deleteRedisPrefix(SHARED_REDIS_URL, ns),
      };
    }
    case 'redis-durable': {
      const redis: RedisProcess = await startRedis({ durable: true });
      return {
        kind,
        shared: true,
        dir: null,
        args: ['--store', redis.url],
        cleanup: async () => {
          await redis.stop();
          await rm(redis.dir, { recursive: true, force: true });
        },
      };
    }
    case 'postgres': {
      const schema = randomName('fgfault');
      return {
        kind,
        shared: true,
        dir: null,
        args: ['--store', PG_URL, '--store-namespace', schema],
        cleanup: () => dropSchema(schema),
      };
    }
    case 'embedded': {
      const dir = await tempDir('fg-fault-');
      return {
        kind,
        shared: true,
        dir,
        args: ['--store', dir],
        cleanup: () => rm(dir, { recursive: true, force: true }),
      };
    }
  }
}

async function deleteRedisPrefix(url: string, prefix: string): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 2 });
  try {
    await redis.connect();
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}
