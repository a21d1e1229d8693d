/**
 * What the Redis store does on a Redis Cluster beyond the store contract (which runs on
 * one too, store-contract.test.ts): hash slots computed as Redis does, one turn's fence
 * batch split per slot over every primary, the durability check on every primary at open
 * and again when a connection is replaced, and a promoted replica (a failover) seen by the
 * identity check, which starts a new epoch. A private cluster (redis-cluster.ts).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { keySlot } from '../../src/store/redis/cluster.js';
import { RedisDurabilityError } from '../../src/store/redis/durability.js';
import { lockKeys } from '../../src/store/redis/keys.js';
import { openRedisStore } from '../../src/store/redis/store.js';
import type { Store, StoreReset } from '../../src/store/types.js';
import { sharedRedisCluster, type ClusterNode } from '../helpers/redis-cluster.js';
import { deleteClusterPrefix } from '../helpers/redis-cluster-seed.js';
import { uniqueName } from '../helpers/stores.js';
import { waitUntil } from '../helpers/wait.js';

const opened: { store: Store; prefix: string }[] = [];
afterAll(async () => {
  const { spec } = await sharedRedisCluster();
  for (const o of opened) {
    await o.store.close();
    await deleteClusterPrefix(spec, o.prefix);
  }
});

async function open(prefix = uniqueName('fgt')): Promise<Store> {
  const { spec } = await sharedRedisCluster();
  const store = await openRedisStore(spec, { namespace: prefix });
  opened.push({ store, prefix });
  return store;
}

async function call(node: ClusterNode, ...args: [string, ...(string | number)[]]): Promise<unknown> {
  const c = await sharedRedisCluster();
  const r = await c.connect(node);
  try {
    return await r.call(...args);
  } finally {
    r.disconnect();
  }
}

async function primaries(): Promise<ClusterNode[]> {
  const c = await sharedRedisCluster();
  const masters = (await c.topology()).filter((n) => n.role === 'master' && !n.failed);
  return c.nodes.filter((n) => masters.some((m) => m.port === n.port));
}

describe('Redis store on a Redis Cluster', () => {
  it('computes hash slots as Redis does, hash tags and awkward keys included', async () => {
    const [node] = await primaries();
    for (const key of [
      'a',
      'fg:{order:42}:inf',
      'fg:{}:x',
      'fg:{a%7Db}:lease',
      '{',
      '}{',
      'ü{ß}',
      'k'.repeat(300),
    ]) {
      expect(keySlot(key), key).toBe(Number(await call(node!, 'CLUSTER', 'KEYSLOT', key)));
    }
  });

  it('one turn of admissions and finishes on locks of every primary: split per slot, each answered', async () => {
    const store = await open();
    const c = await sharedRedisCluster();
    const locks = Array.from({ length: 24 }, (_, i) => `turn:${i}`);
    const owners = new Set<number>();
    for (const l of locks) owners.add((await c.primaryOfSlot(keySlot(lockKeys('x', l).inf))).port);
    expect(owners.size).toBe(3);
    const leases = await Promise.all(
      locks.map(async (key) => {
        const r = await store.tryAcquire({ key, owner: 'o', ttlMs: 30_000 });
        if (!r.ok) throw new Error(`no grant for ${key}`);
        return r.lease;
      }),
    );
    const admits = await Promise.all(
      leases.map((l) =>
        store.admit({
          lock: l.key,
          token: l.token,
          check: 'token',
          requestId: `r-${l.key}`,
          session: 's',
          record: true,
        }),
      ),
    );
    expect(admits.every((a) => a.ok)).toBe(true);
    await Promise.all(leases.map((l) => store.finish(l.key, `r-${l.key}`)));
    const page = await store.listLocks({ prefix: 'turn:', after: null, limit: 100 });
    expect(page.locks.map((l) => l.key).sort()).toEqual([...locks].sort());
  });

  it("one turn's batches on every primary share one read of the epoch floor, after all their replies", async () => {
    const prefix = uniqueName('fgt');
    const store = await open(prefix);
    const c = await sharedRedisCluster();
    const epochNode = await c.primaryOfSlot(keySlot(`${prefix}:epoch`));
    const locks = Array.from({ length: 24 }, (_, i) => `one-read:${i}`);
    const leases = await Promise.all(
      locks.map(async (key) => {
        const r = await store.tryAcquire({ key, owner: 'o', ttlMs: 30_000 });
        if (!r.ok) throw new Error(`no grant for ${key}`);
        return r.lease;
      }),
    );
    const admit = (l: (typeof leases)[number], requestId: string) =>
      store.admit({ lock: l.key, token: l.token, check: 'token', requestId, session: 's', record: true });
    await admit(leases[0]!, 'warm'); // the first batch reads the floor before it is sent
    const monitor = await (await c.connect(epochNode)).monitor();
    const reads: string[][] = [];
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args[0]?.toLowerCase() === 'hmget' && args[1] === `${prefix}:epoch`) reads.push(args);
    });
    try {
      const slots = new Set(leases.map((l) => keySlot(lockKeys(prefix, l.key).inf)));
      expect(slots.size).toBeGreaterThan(3);
      const admits = await Promise.all(leases.map((l) => admit(l, `r-${l.key}`)));
      expect(admits.every((a) => a.ok)).toBe(true);
      // One script call per slot, one floor read for the turn (not one per slot).
      await waitUntil('the floor read seen by MONITOR', () => reads.length >= 1, { timeoutMs: 2000 });
      expect(reads).toEqual([['hmget', `${prefix}:epoch`, 'floor']]);
    } finally {
      monitor.disconnect();
    }
  });

  it('checks durability on every primary: at open, and again on a replaced connection (fail closed, then recover)', async () => {
    const store = await open();
    const [weak] = await primaries();
    await call(weak!, 'CONFIG', 'SET', 'appendfsync', 'everysec');
    try {
      const err = await open().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RedisDurabilityError);
      expect((err as Error).message).toContain(`:${weak!.port}`);
      expect((err as Error).message).toMatch(/appendfsync is "everysec"/);
      // The open store's connections are cut: it verifies every primary again before anything.
      await call(weak!, 'CLIENT', 'KILL', 'TYPE', 'normal');
      await waitUntil(
        'the open store fails closed',
        async () => {
          const r = await store
            .tryAcquire({ key: `d:${randomUUID()}`, owner: 'o', ttlMs: 1000 })
            .catch((e) => e);
          return r instanceof StoreUnavailableError && /appendfsync is "everysec"/.test(r.message);
        },
        { timeoutMs: 10_000, everyMs: 100 },
      );
      expect((await store.health()).ok).toBe(false);
    } finally {
      await call(weak!, 'CONFIG', 'SET', 'appendfsync', 'always');
    }
    await waitUntil(
      'the store serves again',
      async () =>
        (await store.tryAcquire({ key: `d:${randomUUID()}`, owner: 'o', ttlMs: 1000 }).catch(() => null))
          ?.ok === true,
      { timeoutMs: 10_000, everyMs: 100 },
    );
  });

  it('a primary that lost its data (FLUSHALL there) is seen by its missing marker: a new epoch above its tokens', async () => {
    const store = await open();
    const resets: StoreReset[] = [];
    store.onReset((r) => resets.push(r));
    const c = await sharedRedisCluster();
    const epochOwner = await c.primaryOfSlot(keySlot(`${opened[opened.length - 1]!.prefix}:epoch`));
    let key = '';
    let owner: ClusterNode | null = null;
    for (let i = 0; owner === null || owner.port === epochOwner.port; i++) {
      key = `amnesia:${i}`;
      owner = await c.primaryOfSlot(keySlot(lockKeys('x', key).inf));
    }
    const before = await store.tryAcquire({ key, owner: 'a', ttlMs: 60_000 });
    if (!before.ok) throw new Error('no grant');
    await call(owner, 'FLUSHALL');
    await call(owner, 'CLIENT', 'KILL', 'TYPE', 'normal');
    await waitUntil(
      'the store reports the new epoch',
      async () => {
        await store.inspect(key).catch(() => null);
        return resets.length > 0;
      },
      { timeoutMs: 20_000, everyMs: 100 },
    );
    const floor = resets[resets.length - 1]!.floor;
    expect(floor).toBeGreaterThanOrEqual(before.lease.token);
    const next = await store.tryAcquire({ key, owner: 'b', ttlMs: 60_000 });
    expect(next.ok && next.lease.token > floor).toBe(true);
  });

  it('a replica promoted by a failover is a new server: a new epoch above every token seen, reported as a reset', async () => {
    const store = await open();
    const resets: StoreReset[] = [];
    store.onReset((r) => resets.push(r));
    const c = await sharedRedisCluster();
    const key = 'failover:probe';
    const before = await store.tryAcquire({ key, owner: 'a', ttlMs: 60_000 });
    if (!before.ok) throw new Error('no grant');
    // The replica of the primary that holds the lock takes over (CLUSTER FAILOVER: a manual one, nothing lost).
    const primary = await c.primaryOfSlot(keySlot(lockKeys('x', key).inf));
    const topo = await c.topology();
    const id = topo.find((n) => n.port === primary.port)?.id;
    const replicaInfo = topo.find((n) => n.masterId === id);
    const replica = c.nodes.find((n) => n.port === replicaInfo?.port);
    if (replica === undefined) throw new Error('no replica');
    await call(replica, 'CLUSTER', 'FAILOVER');
    await waitUntil(
      'the replica is primary',
      async () => (await c.topology()).find((n) => n.port === replica.port)?.role === 'master',
      { timeoutMs: 20_000, everyMs: 100 },
    );
    await c.waitOk();
    // The next call on the lock's slot reaches the promoted primary (by the slot map, or MOVED), which is verified first.
    await waitUntil(
      'the store reports the new epoch',
      async () => {
        await store.inspect(key).catch(() => null);
        return resets.length > 0;
      },
      { timeoutMs: 20_000, everyMs: 100 },
    );
    expect(resets.length).toBeGreaterThan(0);
    const epoch = resets[resets.length - 1]!;
    expect(epoch.floor).toBeGreaterThanOrEqual(before.lease.token);
    // The lease granted before is superseded: not renewed, and the lock is free for the next owner above the floor.
    expect((await store.renew(key, before.lease.leaseId, 60_000)).ok).toBe(false);
    const next = await store.tryAcquire({ key, owner: 'c', ttlMs: 60_000 });
    expect(next.ok && next.lease.token > epoch.floor).toBe(true);
  });

  // Last: it kills a node of this file's cluster.
  it('a watcher whose subscriber node is killed is subscribed again elsewhere and woken', async () => {
    const store = await open();
    const c = await sharedRedisCluster();
    let wakes = 0;
    const stop = await store.watch('sub:lock', () => wakes++);
    try {
      let host: ClusterNode | undefined;
      for (const n of c.nodes) {
        const list = String(await call(n, 'CLIENT', 'LIST').catch(() => ''));
        if (/name=\S*subscriber\S*fencegate-watch/.test(list)) host = n;
      }
      if (host === undefined) throw new Error('no node holds the watcher subscriber');
      await c.kill(host);
      await waitUntil('the listeners are woken after the subscriber is lost', async () => wakes > 0, {
        timeoutMs: 20_000,
        everyMs: 100,
      });
      await c.waitOk();
      // Messages reach the listener again: a release on the lock publishes.
      await waitUntil(
        'a release wakes the listener',
        async () => {
          const before = wakes;
          const g = await store.tryAcquire({ key: 'sub:lock', owner: 'o', ttlMs: 5000 }).catch(() => null);
          if (g?.ok !== true) return false;
          await store.release('sub:lock', g.lease.leaseId).catch(() => null);
          await new Promise((r) => setTimeout(r, 200));
          return wakes > before;
        },
        { timeoutMs: 30_000, everyMs: 100 },
      );
    } finally {
      stop();
    }
  });
});
