/**
 * The etcd store's identity check (docs/adr/0020-etcd-store.md, ADR 0019): etcd's whole
 * state wiped and the cluster recreated on the same addresses under a running store (its
 * revision starts again). The store must raise the epoch above every token it saw before
 * it grants or admits again, and report a reset. Without the check, the recreated lock
 * record's floor (the clock × 1000) is below the token seeded here, and the token would
 * be issued again.
 */
import { afterEach, expect, it } from 'vitest';
import { openEtcdStore } from '../../src/store/etcd/store.js';
import type { Store, StoreReset } from '../../src/store/types.js';
import { startEtcdCluster, type EtcdCluster } from '../helpers/etcd-cluster.js';
import { seedEtcdIssued } from '../helpers/etcd-seed.js';

let cluster: EtcdCluster | null = null;
let store: Store | null = null;
afterEach(async () => {
  await store?.close();
  cluster?.stop();
  store = cluster = null;
});

it('a cluster recreated empty under a running store: the epoch is raised above every token it saw, and a reset reported', async () => {
  cluster = await startEtcdCluster();
  store = await openEtcdStore(cluster.spec, { namespace: 'idt' });
  const resets: StoreReset[] = [];
  store.onReset((r) => resets.push(r));
  const key = 'id:1';
  const first = await store.tryAcquire({ key, owner: 'a', ttlMs: 60_000 });
  expect(first.ok).toBe(true);
  if (!first.ok) return;
  await store.release(key, first.lease.leaseId);
  await seedEtcdIssued(cluster.spec, 'idt', key, 2n ** 60n); // far above the clock × 1000
  const a = await store.tryAcquire({ key, owner: 'a', ttlMs: 60_000 });
  if (!a.ok) throw new Error(JSON.stringify(a));
  expect(a.lease.token).toBe(2n ** 60n + 1n);
  expect(
    await store.admit({
      lock: key,
      token: a.lease.token,
      check: 'token',
      requestId: 'r1',
      session: 's',
      record: true,
    }),
  ).toMatchObject({ ok: true });

  await cluster.wipe();

  // The store's client reconnects; its first answers carry a revision below what it saw.
  let b: Awaited<ReturnType<Store['tryAcquire']>> | null = null;
  for (let i = 0; i < 100 && b === null; i++) {
    b = await store.tryAcquire({ key, owner: 'b', ttlMs: 60_000 }).catch(() => null);
    if (b === null) await new Promise((r) => setTimeout(r, 100));
  }
  if (b === null || !b.ok) throw new Error(`no grant after the wipe: ${JSON.stringify(b)}`);
  expect(b.lease.token).toBeGreaterThan(a.lease.token);
  expect(resets).toHaveLength(1);
  expect(resets[0]?.reason).toMatch(/revision went back/);
  expect(resets[0]?.floor).toBeGreaterThanOrEqual(a.lease.token);
  // a's token is at or below the new floor: refused.
  expect(
    await store.admit({
      lock: key,
      token: a.lease.token,
      check: 'token',
      requestId: 'r2',
      session: 's',
      record: true,
    }),
  ).toMatchObject({ ok: false, reason: 'stale' });
}, 60_000);
