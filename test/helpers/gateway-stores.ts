/**
 * The stores gateway integration tests run on: the in-memory reference store and
 * the real backends (Redis, embedded LMDB, Postgres, etcd on a private 3-member cluster
 * started once per test file: etcd-cluster.ts, Redis Cluster on a private 3-primary
 * cluster started once per test file: redis-cluster.ts). FENCEGATE_GATEWAY_STORES
 * selects (comma-separated; default: all). A selected store that cannot be opened fails
 * the tests; it is never skipped.
 */
import { randomBytes } from 'node:crypto';
import type { Store } from '../../src/store/types.js';
import { sharedEtcdCluster } from './etcd-cluster.js';
import { withKeyPrefix } from './key-prefix-store.js';
import { MemoryStore } from './memory-store.js';
import { openTestRedisStore } from './redis-fixture.js';
import { embeddedFixture, postgresFixture } from './sql-fixtures.js';

export interface OpenedStore {
  store: Store;
  close(): Promise<void>;
}

export interface GatewayStoreFactory {
  name: string;
  open(): Promise<OpenedStore>;
}

let shared: ReturnType<typeof embeddedFixture> | undefined;

/** Closes the store shared by the tests of a file (call in afterAll). */
export async function closeSharedStores(): Promise<void> {
  const pending = shared;
  shared = undefined;
  if (pending !== undefined) await (await pending).close();
}

const ALL: GatewayStoreFactory[] = [
  {
    name: 'memory',
    async open() {
      const store = new MemoryStore();
      return { store, close: () => store.close() };
    },
  },
  { name: 'redis', open: () => openTestRedisStore() },
  {
    // One store per test file, one key prefix per test.
    name: 'embedded',
    async open() {
      shared ??= embeddedFixture();
      const store = withKeyPrefix((await shared).store, `t${randomBytes(4).toString('hex')}:`);
      return { store, close: async () => undefined };
    },
  },
  { name: 'postgres', open: () => postgresFixture() },
  {
    name: 'redis-cluster',
    async open() {
      const { openRedisStore } = await import('../../src/store/redis/store.js');
      const { deleteClusterPrefix } = await import('./redis-cluster-seed.js');
      const { sharedRedisCluster } = await import('./redis-cluster.js');
      const { spec } = await sharedRedisCluster();
      const prefix = `t${randomBytes(6).toString('hex')}`;
      const store = await openRedisStore(spec, { namespace: prefix });
      return {
        store,
        async close() {
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
      const { deleteEtcdNamespace } = await import('./etcd-seed.js');
      const { spec } = await sharedEtcdCluster();
      const ns = `t${randomBytes(6).toString('hex')}`;
      const store = await openEtcdStore(spec, { namespace: ns });
      return {
        store,
        async close() {
          await store.close();
          await deleteEtcdNamespace(spec, ns);
        },
      };
    },
  },
];

const wanted = process.env.FENCEGATE_GATEWAY_STORES?.split(',').map((s) => s.trim());

export const GATEWAY_STORES: GatewayStoreFactory[] = wanted
  ? ALL.filter((f) => wanted.includes(f.name))
  : ALL;
