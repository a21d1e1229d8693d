/**
 * The stores every contract test runs on. Each harness gets a fresh namespace
 * (Redis key prefix, Postgres schema, embedded directory) and removes it after.
 * The URLs can be pointed elsewhere with FENCEGATE_TEST_REDIS / FENCEGATE_TEST_POSTGRES.
 * etcd runs on a private 3-member cluster the test process starts (etcd-cluster.ts), and
 * Redis Cluster on a private 3-primary cluster with a replica each (redis-cluster.ts).
 */
import { rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Redis } from 'ioredis';
import type { Store } from '../../src/store/types.js';

export const REDIS_URL = process.env.FENCEGATE_TEST_REDIS ?? 'redis://127.0.0.1:6379';
export const POSTGRES_URL = process.env.FENCEGATE_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface Harness {
  /** The open store. */
  store: Store;
  /** Test-only: set the highest issued token of a key directly in the backend. */
  seedIssued(key: string, token: bigint): Promise<void>;
  /** Another store on the same backend and namespace, as a second process would open it (closed by close()). */
  another(): Promise<Store>;
  close(): Promise<void>;
}

export interface StoreFixture {
  name: 'embedded' | 'postgres' | 'redis' | 'redis-cluster' | 'etcd';
  open(): Promise<Harness>;
}

export const uniqueName = (prefix: string) => `${prefix}_${randomBytes(6).toString('hex')}`;

export async function dropPostgresSchema(url: string, schema: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await c.end();
  }
}

export async function deleteRedisPrefix(url: string, prefix: string): Promise<void> {
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await r.connect();
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await r.del(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
}

export const STORE_FIXTURES: StoreFixture[] = [
  {
    name: 'embedded',
    async open() {
      const { openEmbeddedStore } = await import('../../src/store/lmdb/store.js');
      const { seedEmbeddedIssued } = await import('./embedded-seed.js');
      const { freshEmbeddedDir } = await import('./embedded-template.js');
      const dir = await freshEmbeddedDir();
      const others: Store[] = [];
      const h: Harness = {
        store: await openEmbeddedStore(dir),
        seedIssued: (key, token) => seedEmbeddedIssued(dir, key, token),
        another: async () => others[others.push(await openEmbeddedStore(dir)) - 1]!,
        async close() {
          for (const o of others) await o.close();
          await h.store.close();
          await rm(dir, { recursive: true, force: true });
        },
      };
      return h;
    },
  },
  {
    name: 'postgres',
    async open() {
      const { openPostgresStore } = await import('../../src/store/sql/store.js');
      const { seedPostgresIssued } = await import('./sql-seed.js');
      const schema = uniqueName('fgt');
      const store = await openPostgresStore(POSTGRES_URL, { namespace: schema });
      const others: Store[] = [];
      return {
        store,
        seedIssued: (key, token) => seedPostgresIssued(POSTGRES_URL, schema, key, token),
        another: async () =>
          others[others.push(await openPostgresStore(POSTGRES_URL, { namespace: schema })) - 1]!,
        async close() {
          for (const o of others) await o.close();
          await store.close();
          await dropPostgresSchema(POSTGRES_URL, schema);
        },
      };
    },
  },
  {
    name: 'redis',
    async open() {
      const { openRedisStore } = await import('../../src/store/redis/store.js');
      const { seedRedisIssued } = await import('./redis-seed.js');
      const prefix = uniqueName('fgt');
      const open = () => openRedisStore(REDIS_URL, { namespace: prefix, allowVolatileRedis: true });
      const store = await open();
      const others: Store[] = [];
      return {
        store,
        seedIssued: (key, token) => seedRedisIssued(REDIS_URL, prefix, key, token),
        another: async () => others[others.push(await open()) - 1]!,
        async close() {
          for (const o of others) await o.close();
          await store.close();
          await deleteRedisPrefix(REDIS_URL, prefix);
        },
      };
    },
  },
  {
    name: 'redis-cluster',
    async open() {
      const { openRedisStore } = await import('../../src/store/redis/store.js');
      const { seedClusterIssued, deleteClusterPrefix } = await import('./redis-cluster-seed.js');
      const { sharedRedisCluster } = await import('./redis-cluster.js');
      const { spec } = await sharedRedisCluster();
      const prefix = uniqueName('fgt');
      const open = () => openRedisStore(spec, { namespace: prefix });
      const store = await open();
      const others: Store[] = [];
      return {
        store,
        seedIssued: (key, token) => seedClusterIssued(spec, prefix, key, token),
        another: async () => others[others.push(await open()) - 1]!,
        async close() {
          for (const o of others) await o.close();
          await store.close();
          await deleteClusterPrefix(spec, prefix);
        },
      };
    },
  },
  {
    name: 'etcd',
    async open() {
      const { openEtcdStore } = await import('../../src/store/etcd/store.js');
      const { seedEtcdIssued, deleteEtcdNamespace } = await import('./etcd-seed.js');
      const { sharedEtcdCluster } = await import('./etcd-cluster.js');
      const { spec } = await sharedEtcdCluster();
      const ns = uniqueName('fgt');
      const open = () => openEtcdStore(spec, { namespace: ns });
      const store = await open();
      const others: Store[] = [];
      return {
        store,
        seedIssued: (key, token) => seedEtcdIssued(spec, ns, key, token),
        another: async () => others[others.push(await open()) - 1]!,
        async close() {
          for (const o of others) await o.close();
          await store.close();
          await deleteEtcdNamespace(spec, ns);
        },
      };
    },
  },
];
