/**
 * The etcd store when its cluster stops answering (every member paused: sockets open,
 * nothing answered): every call fails with StoreUnavailableError instead of waiting on,
 * watch() included, health says so, and all works again once the members answer.
 */
import { afterEach, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { openEtcdStore } from '../../src/store/etcd/store.js';
import type { Store } from '../../src/store/types.js';
import { startEtcdCluster, type EtcdCluster } from '../helpers/etcd-cluster.js';

let cluster: EtcdCluster | null = null;
let store: Store | null = null;
afterEach(async () => {
  for (const m of cluster?.members ?? []) cluster?.resume(m);
  await store?.close();
  cluster?.stop();
  store = cluster = null;
});

it('fails every call, watch() included, while no member answers, and recovers after', async () => {
  cluster = await startEtcdCluster();
  const c = cluster;
  store = await openEtcdStore(c.spec, { namespace: 'out' });
  const s = store;
  const a = await s.tryAcquire({ key: 'k', owner: 'a', ttlMs: 60_000 });
  expect(a.ok).toBe(true);

  for (const m of c.members) c.pause(m);
  await expect(s.watch('k2', () => undefined)).rejects.toBeInstanceOf(StoreUnavailableError);
  await expect(s.tryAcquire({ key: 'k', owner: 'b', ttlMs: 60_000 })).rejects.toBeInstanceOf(
    StoreUnavailableError,
  );
  expect((await s.health()).ok).toBe(false);

  for (const m of c.members) c.resume(m);
  let health = await s.health();
  for (let i = 0; i < 50 && !health.ok; i++) health = await s.health();
  expect(health.ok).toBe(true);
  expect(await s.tryAcquire({ key: 'k', owner: 'b', ttlMs: 60_000 })).toMatchObject({
    ok: false,
    reason: 'held',
  });
  const off = await s.watch('k2', () => undefined);
  off();
}, 90_000);

it('health names the cluster, its leader and the members that answered', async () => {
  cluster = await startEtcdCluster();
  store = await openEtcdStore(cluster.spec, { namespace: 'hl' });
  const h = await store.health();
  expect(h).toMatchObject({ ok: true, kind: 'etcd' });
  expect(h.detail).toMatch(/cluster [0-9a-f]+, leader [0-9a-f]+, raft term \d+, members answered [0-9a-f]+/);
  expect(h.epoch?.floor).toBeGreaterThan(0n);
}, 60_000);
