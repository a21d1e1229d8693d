/**
 * The etcd store's housekeeping (src/store/etcd/prune.ts) on a real 3-member cluster:
 * expired grant replay records, queues whose waiters all expired, dead idempotency
 * records and in-flight entries of ended sessions go, in pages; every live record stays;
 * a record that changed between the read and the removal stays; and the store starts a
 * round by itself on a grant.
 */
import { Etcd3, type KVClient } from 'etcd3';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type {
  GrantRec,
  IdempotencyRec,
  InflightRec,
  SessionRec,
  WaiterRec,
} from '../../src/store/lmdb/db.js';
import { recordKey, tablePrefix, type RecordKey, type TableName } from '../../src/store/etcd/keys.js';
import { EtcdHousekeeper } from '../../src/store/etcd/prune.js';
import { encodeRecord } from '../../src/store/etcd/snapshot.js';
import { openEtcdStore } from '../../src/store/etcd/store.js';
import { sharedEtcdCluster, type EtcdCluster } from '../helpers/etcd-cluster.js';
import { randomNamespace } from '../helpers/e2e.js';
import { waitUntil } from '../helpers/wait.js';

let cluster: EtcdCluster;
let client: Etcd3;

beforeAll(async () => {
  cluster = await sharedEtcdCluster();
  client = new Etcd3({ hosts: cluster.members.map((m) => m.clientUrl) });
}, 60_000);

afterAll(() => client?.close());

const HOUR = 3_600_000;

async function put(ns: string, table: TableName, key: RecordKey, value: unknown): Promise<void> {
  await client.put(recordKey(ns, table, key)).value(encodeRecord(table, value));
}

async function keysOf(ns: string, table: TableName): Promise<string[]> {
  const keys = await client.getAll().prefix(tablePrefix(ns, table)).keys();
  return keys.map((k) => k.slice(tablePrefix(ns, table).length)).sort();
}

function grant(keepUntil: number): GrantRec {
  return { leaseId: 'l', token: '7', ttlMs: 1000, expiresAt: keepUntil - 1, tookOver: false, keepUntil };
}

function idem(until: number): IdempotencyRec {
  return { fingerprint: 'f', attempt: null, until, response: Buffer.from('kept answer') };
}

/** Seeds one of each kind of record, expired and live; returns what must stay. */
async function seed(ns: string, now: number): Promise<void> {
  for (let i = 0; i < 7; i++) await put(ns, 'grants', [`k${i}`, `r${i}`, 'w'], grant(now - 1));
  await put(ns, 'grants', ['live', 'r', 'w'], grant(now + HOUR));
  const waiter = (id: string, deadline: number): WaiterRec => ({ id, deadline });
  await put(ns, 'waiters', 'gone', [waiter('a', now - 2), waiter('b', now - 1)]);
  await put(ns, 'waiters', 'half', [waiter('a', now - 2), waiter('b', now + HOUR)]);
  await put(ns, 'idempotency', 'old', idem(now - 1));
  await put(ns, 'idempotency', 'new', idem(now + HOUR));
  const session: SessionRec = { beat: now, ttlMs: HOUR, startedAt: now };
  await put(ns, 'sessions', 'alive', session);
  const mixed: InflightRec = {
    q1: ['5', 'ended', 0], // a leftover: removed
    q2: ['5', 'ended', 3000], // delivering: left to the gateway watching it for its bound
    q3: ['6', 'alive', 0], // of a live session
  };
  await put(ns, 'inflight', 'mixed', mixed);
  await put(ns, 'inflight', 'orphan', { q4: ['5', 'ended'] } satisfies InflightRec);
}

it('removes every expired record and no live one, page by page', async () => {
  const ns = randomNamespace('fghk');
  const now = Date.now();
  await seed(ns, now);
  const keeper = new EtcdHousekeeper(client.kv, ns, 3); // pages of 3: the grants take three
  const counts = await keeper.round(
    () => now,
    () => false,
  );
  expect(counts).toEqual({ grants: 7, waiters: 1, idempotency: 1, inflight: 2 });
  expect(await keysOf(ns, 'grants')).toEqual(['["live","r","w"]']);
  expect(await keysOf(ns, 'waiters')).toEqual(['half']);
  expect(await keysOf(ns, 'idempotency')).toEqual(['new']);
  expect(await keysOf(ns, 'inflight')).toEqual(['mixed']);
  const left = JSON.parse((await client.get(recordKey(ns, 'inflight', 'mixed')).string()) ?? '{}');
  expect(left).toEqual({ q2: ['5', 'ended', 3000], q3: ['6', 'alive', 0] });
  // The kept answer of the live idempotency record is intact (bytes survive the sweep).
  const kept = JSON.parse((await client.get(recordKey(ns, 'idempotency', 'new')).string()) ?? '{}');
  expect(Buffer.from(kept.response.$bytes, 'base64').toString()).toBe('kept answer');
  // A second round finds nothing more.
  expect(
    await keeper.round(
      () => now,
      () => false,
    ),
  ).toEqual({ grants: 0, waiters: 0, idempotency: 0, inflight: 0 });
});

it('leaves a record that changed after it was read', async () => {
  const ns = randomNamespace('fghk');
  const now = Date.now();
  await put(ns, 'waiters', 'q', [{ id: 'a', deadline: now - 1 }]);
  await put(ns, 'grants', ['k', 'r', 'w'], grant(now - 1));
  // Between the sweep's read and its removal, a waiter joins the queue.
  let raced = false;
  const kv = new Proxy(client.kv, {
    get(target, prop, receiver) {
      if (prop !== 'txn') return Reflect.get(target, prop, receiver) as unknown;
      return async (req: Parameters<KVClient['txn']>[0]) => {
        if (!raced) {
          raced = true;
          await put(ns, 'waiters', 'q', [
            { id: 'a', deadline: now - 1 },
            { id: 'b', deadline: now + HOUR },
          ]);
        }
        return target.txn(req);
      };
    },
  });
  const counts = await new EtcdHousekeeper(kv, ns).round(
    () => now,
    () => false,
  );
  expect(raced).toBe(true);
  expect(counts.grants).toBe(1); // swept before the race
  expect(counts.waiters).toBe(0);
  expect(await keysOf(ns, 'waiters')).toEqual(['q']);
});

it('the store sweeps by itself when it grants', async () => {
  const ns = randomNamespace('fghk');
  await put(ns, 'grants', ['k', 'r', 'w'], grant(Date.now() - 1));
  const store = await openEtcdStore(cluster.spec, { namespace: ns });
  try {
    const r = await store.tryAcquire({ key: 'other', owner: 'w', ttlMs: 5000 });
    expect(r.ok).toBe(true);
    await waitUntil(
      'the expired grant record removed',
      async () => (await keysOf(ns, 'grants')).length === 0,
      {
        timeoutMs: 10_000,
        everyMs: 50,
      },
    );
  } finally {
    await store.close();
  }
}, 30_000);
