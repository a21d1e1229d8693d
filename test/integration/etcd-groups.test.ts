/**
 * The etcd store's groups (src/store/etcd/serial.ts, txn.ts runGroup) on a real cluster:
 * the operations queued on one lock while a transaction is at etcd go as one transaction,
 * each seeing the writes of those before it, with the answers each would have had alone;
 * a rule that throws fails alone; and many concurrent writes of one lock cost far fewer
 * transactions than writes.
 */
import { Etcd3, type ITxnRequest } from 'etcd3';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { recordKey } from '../../src/store/etcd/keys.js';
import type { Snapshot } from '../../src/store/etcd/snapshot.js';
import { KeyQueue } from '../../src/store/etcd/serial.js';
import { TxnRunner } from '../../src/store/etcd/txn.js';
import { openEtcdStore } from '../../src/store/etcd/store.js';
import type { Store } from '../../src/store/types.js';
import { sharedEtcdCluster, type EtcdCluster } from '../helpers/etcd-cluster.js';
import { randomNamespace } from '../helpers/e2e.js';

let cluster: EtcdCluster;
let client: Etcd3;

beforeAll(async () => {
  cluster = await sharedEtcdCluster();
  client = new Etcd3({ hosts: cluster.members.map((m) => m.clientUrl) });
}, 60_000);

afterAll(() => client?.close());

const noCheck = { sent: () => 0n, check: () => undefined };

/** A rule adding `n` to a counter in the meta table and answering the value it saw. */
const add = (n: number) => (snap: Snapshot) => {
  const seen = (snap.meta.get('counter') as number | undefined) ?? 0;
  snap.meta.put('counter', seen + n);
  return { result: seen, notify: [] };
};

it('a group runs its rules in order, each on the writes before it, committed as one transaction', async () => {
  const ns = randomNamespace('fggrp');
  const runner = new TxnRunner(client.kv, ns, noCheck);
  const counter = recordKey(ns, 'meta', 'counter');
  const boom = (snap: Snapshot) => {
    snap.meta.put('counter', 1000); // taken back: the rule fails alone
    throw new Error('rule failed');
  };
  const settled = await runner.runGroup<number>([
    { keys: [counter], rule: add(1) },
    { keys: [counter], rule: add(10) },
    { keys: [counter], rule: boom },
    { keys: [counter], rule: add(100) },
  ]);
  expect(settled).toEqual([
    { ok: true, value: 0 },
    { ok: true, value: 1 },
    { ok: false, error: new Error('rule failed') },
    { ok: true, value: 11 },
  ]);
  expect(JSON.parse((await client.get(counter).string()) ?? 'null')).toBe(111);
  // One revision for the whole group: the four rules were one commit.
  const kv = (await client.get(counter).exec()).kvs[0];
  expect(kv?.create_revision).toBe(kv?.mod_revision);
});

it('a group runs again whole when another writer changed what it read', async () => {
  const ns = randomNamespace('fggrp');
  const counter = recordKey(ns, 'meta', 'counter');
  await client.put(counter).value('5');
  let interfered = false;
  const kv = new Proxy(client.kv, {
    get(target, prop, receiver) {
      if (prop !== 'txn') return Reflect.get(target, prop, receiver) as unknown;
      return async (req: ITxnRequest) => {
        // Before the group's first commit (a txn with compares), another process writes.
        if (!interfered && (req.compare?.length ?? 0) > 0) {
          interfered = true;
          await client.put(counter).value('50');
        }
        return target.txn(req);
      };
    },
  });
  const settled = await new TxnRunner(kv, ns, noCheck).runGroup<number>([
    { keys: [counter], rule: add(1) },
    { keys: [counter], rule: add(2) },
  ]);
  expect(interfered).toBe(true);
  expect(settled).toEqual([
    { ok: true, value: 50 },
    { ok: true, value: 51 },
  ]);
  expect(JSON.parse((await client.get(counter).string()) ?? 'null')).toBe(53);
});

it('the queue sends what waited meanwhile as the next group', async () => {
  const groups: number[] = [];
  const ns = randomNamespace('fggrp');
  const runner = new TxnRunner(client.kv, ns, noCheck);
  const queue = new KeyQueue((ops) => {
    groups.push(ops.length);
    return runner.runGroup(ops);
  });
  const counter = recordKey(ns, 'meta', 'counter');
  const seen = await Promise.all(
    Array.from({ length: 20 }, () => queue.run('l:x', { keys: [counter], rule: add(1) })),
  );
  // Each saw a different value: the twenty ran one after another, none lost.
  expect([...seen].sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i));
  expect(groups[0]).toBe(1); // the first went alone, at once
  expect(groups.length).toBeLessThan(20); // the others waited for it and went together
  expect(groups.reduce((a, b) => a + b, 0)).toBe(20);
});

it('the store: 40 concurrent admissions and finishes of one lock, every one answered as alone', async () => {
  const store: Store = await openEtcdStore(cluster.spec, { namespace: randomNamespace('fggrp') });
  try {
    const session = 'gw-1';
    await store.openSession(session, 30_000);
    const g = await store.tryAcquire({ key: 'hot', owner: 'w', ttlMs: 30_000 });
    if (!g.ok) throw new Error('not granted');
    const token = g.lease.token;
    const writes = Array.from({ length: 40 }, (_, i) => `r${i}`);
    const admitted = await Promise.all(
      writes.map((requestId) =>
        store.admit({ lock: 'hot', token, requestId, session, check: 'token', record: true }),
      ),
    );
    expect(admitted.every((a) => a.ok)).toBe(true);
    await Promise.all(writes.map((requestId) => store.finish('hot', requestId)));
    const inflight = await store.lowerInflight('hot', token + 1n);
    expect(inflight).toMatchObject({ count: 0 });
    // A lower token is stale after them, as it would be after forty lone admissions.
    const stale = await store.admit({
      lock: 'hot',
      token: token - 1n,
      requestId: 'old',
      session,
      check: 'token',
      record: true,
    });
    expect(stale.ok).toBe(false);
  } finally {
    await store.close();
  }
}, 30_000);
