/**
 * The Redis store beyond the shared contract (test/integration/store-contract.test.ts):
 * queue details, retry hints, replay details, epochs and state loss, shadow admission,
 * and pub/sub reference counting. Real Redis, a random prefix per test.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { lockKeys } from '../../src/store/redis/keys.js';
import { openRedisStore } from '../../src/store/redis/store.js';
import type { Lease, Store } from '../../src/store/types.js';
import { openTestRedisStore, type OpenedRedisStore } from '../helpers/redis-fixture.js';
import { dropRedisPrefix, redisCall, redisKeysUnder } from '../helpers/redis-seed.js';
import { sleep, waitUntil } from '../helpers/wait.js';

let t: OpenedRedisStore;
let store: Store;
beforeEach(async () => {
  t = await openTestRedisStore();
  store = t.store;
});
afterEach(async () => {
  await t.close();
});

async function grant(key: string, owner = 'w', ttlMs = 10_000): Promise<Lease> {
  const r = await store.tryAcquire({ key, owner, ttlMs });
  if (!r.ok) throw new Error(`expected a grant, got ${JSON.stringify(r)}`);
  return r.lease;
}

const admit = (lock: string, token: bigint, record = true, check: 'token' | 'lease' = 'token') =>
  store.admit({ lock, token, check, requestId: randomUUID(), session: 's', record });

describe('acquire', () => {
  it('mints the first token of a key above the clock floor, then +1 per grant', async () => {
    const now = await store.now();
    const a = await grant('k');
    expect(a.token).toBeGreaterThan(BigInt(now) * 1000n - 5_000_000n);
    await store.release('k', a.leaseId);
    expect((await grant('k')).token).toBe(a.token + 1n);
    expect(a.expiresAt - now).toBeGreaterThan(9000);
  });

  it('answers held with retryAfterMs bounded by the lease', async () => {
    await grant('k', 'a', 800);
    const r = await store.tryAcquire({ key: 'k', owner: 'b', ttlMs: 1000 });
    expect(r).toMatchObject({ ok: false, reason: 'held', blockedBy: 'lease' });
    if (r.ok || r.reason !== 'held') return;
    expect(r.retryAfterMs).toBeGreaterThanOrEqual(1);
    expect(r.retryAfterMs).toBeLessThanOrEqual(800);
  });

  it('retryAfterMs is the deadline of a queued waiter ahead when that comes first', async () => {
    await grant('k', 'a', 10_000);
    await store.enqueueWaiter('k', 'w1', 300);
    const r = await store.tryAcquire({ key: 'k', owner: 'b', ttlMs: 1000 });
    expect(r).toMatchObject({ ok: false, reason: 'held' });
    if (r.ok || r.reason !== 'held') return;
    expect(r.retryAfterMs).toBeLessThanOrEqual(300);
  });

  it('only the head waiter may take a free lock; its entry goes with the grant', async () => {
    await store.enqueueWaiter('k', 'w1', 10_000);
    await store.enqueueWaiter('k', 'w2', 10_000);
    await store.enqueueWaiter('k', 'w1', 10_000); // again: keeps its place
    expect((await store.tryAcquire({ key: 'k', owner: 'b', ttlMs: 1000, waiterId: 'w2' })).ok).toBe(false);
    const w1 = await store.tryAcquire({ key: 'k', owner: 'a', ttlMs: 1000, waiterId: 'w1' });
    expect(w1).toMatchObject({ ok: true, lease: { owner: 'a' } });
    expect((await store.inspect('k'))?.waiters).toBe(1);
    if (!w1.ok) return;
    await store.release('k', w1.lease.leaseId);
    expect((await store.tryAcquire({ key: 'k', owner: 'b', ttlMs: 1000, waiterId: 'w2' })).ok).toBe(true);
    expect((await store.inspect('k'))?.waiters).toBe(0);
  });

  it('a removed waiter no longer blocks, and watchers hear about it', async () => {
    await store.enqueueWaiter('k', 'w1', 10_000);
    let calls = 0;
    const off = await store.watch('k', () => calls++);
    await store.removeWaiter('k', 'w1');
    expect((await store.tryAcquire({ key: 'k', owner: 'b', ttlMs: 1000 })).ok).toBe(true);
    await waitFor(() => calls > 0);
    off();
  });

  it('reports tookOverExpired only for a lapsed unreleased lease', async () => {
    const a = await store.tryAcquire({ key: 'k', owner: 'a', ttlMs: 100 });
    expect(a).toMatchObject({ ok: true, tookOverExpired: false });
    await sleep(150);
    const b = await store.tryAcquire({ key: 'k', owner: 'b', ttlMs: 100 });
    expect(b).toMatchObject({ ok: true, tookOverExpired: true });
    if (!b.ok) return;
    await store.release('k', b.lease.leaseId);
    expect(await store.tryAcquire({ key: 'k', owner: 'c', ttlMs: 100 })).toMatchObject({
      tookOverExpired: false,
    });
  });

  it('a replay returns the renewed expiry of the same lease', async () => {
    const first = await store.tryAcquire({ key: 'k', owner: 'a', ttlMs: 1000, requestId: 'r1' });
    if (!first.ok) throw new Error('no grant');
    const renewed = await store.renew('k', first.lease.leaseId, 60_000);
    if (!renewed.ok) throw new Error('no renew');
    const again = await store.tryAcquire({ key: 'k', owner: 'a', ttlMs: 1000, requestId: 'r1' });
    expect(again).toMatchObject({ ok: true, replayed: true, lease: { leaseId: first.lease.leaseId } });
    if (!again.ok) return;
    expect(again.lease.expiresAt).toBe(renewed.lease.expiresAt);
    expect(again.lease.ttlMs).toBe(60_000);
  });

  it('keeps idempotency records at least 10 minutes', async () => {
    await store.tryAcquire({ key: 'k', owner: 'a', ttlMs: 1000, requestId: 'r1' });
    const reqKey = lockKeys(t.prefix, 'k').req('a', 'r1');
    const pttl = Number(await redisCall(t.url, 'PTTL', reqKey));
    expect(pttl).toBeGreaterThan(9.9 * 60_000);
    expect(pttl).toBeLessThanOrEqual(10 * 60_000);
  });

  it('releases a lapsed lease nobody replaced, but never renews it', async () => {
    const a = await grant('k', 'a', 100);
    await sleep(150);
    expect(await store.renew('k', a.leaseId, 1000)).toEqual({ ok: false, reason: 'lease-lost' });
    expect(await store.release('k', a.leaseId)).toEqual({ ok: true });
    expect(await store.inspect('k')).toMatchObject({
      held: false,
      owner: null,
      token: a.token,
      issued: a.token,
    });
  });
});

describe('listLocks', () => {
  it('lists live leases and queues only, bounded by limit', async () => {
    await grant('live:1');
    await grant('live:2');
    const lapsed = await grant('lapsed', 'w', 100);
    await store.enqueueWaiter('queued', 'w1', 10_000);
    const released = await grant('released');
    await store.release('released', released.leaseId);
    await sleep(150);
    const all = (await store.listLocks({ limit: 100, prefix: '', after: null })).locks;
    expect(all.map((l) => l.key).sort()).toEqual(['live:1', 'live:2']);
    // 'queued' has waiters but no counter: inspect() is null for it, so it is not listed
    expect(await store.inspect('queued')).toBeNull();
    expect((await store.listLocks({ limit: 1, prefix: '', after: null })).locks).toHaveLength(1);
    expect((await store.listLocks({ limit: 0, prefix: '', after: null })).locks).toEqual([]);
    expect(lapsed.token).toBeGreaterThan(0n);
  });
});

describe('admit', () => {
  it('writes nothing in shadow mode', async () => {
    const a = await grant('f');
    const before = await redisKeysUnder(t.url, t.prefix);
    expect(await admit('f', a.token, false)).toMatchObject({ ok: true, highest: a.token, lowerInflight: 0 });
    expect(await admit('f', a.token + 1n, false)).toMatchObject({ ok: false, reason: 'forged' });
    expect(await redisKeysUnder(t.url, t.prefix)).toEqual(before);
  });

  it('refuses the token of another lease under check "lease"', async () => {
    const a = await grant('f', 'a', 100);
    await sleep(150);
    const b = await grant('f', 'b');
    expect(await admit('f', a.token, true, 'lease')).toMatchObject({ ok: false, reason: 'lease-expired' });
    expect(await admit('f', b.token, true, 'lease')).toMatchObject({ ok: true, highest: b.token });
  });

  it("reports the gateway sessions of lower in-flight writes, and drops only an ended session's", async () => {
    const a = await grant('f', 'a', 100);
    const entry = (requestId: string, session: string) =>
      store.admit({ lock: 'f', token: a.token, check: 'token', requestId, session, record: true });
    await entry('r1', 's1');
    await entry('r2', 's2');
    await entry('r3', 's2');
    const s = await store.lowerInflight('f', a.token + 1n);
    expect(s.count).toBe(3);
    expect([...s.sessions].sort()).toEqual(['s1', 's2']);
    expect(await store.lowerInflight('f', a.token)).toEqual({ count: 0, sessions: [], bounds: [] });
    await store.dropInflight('f', ['s2', 'nobody'], 0);
    expect(await store.lowerInflight('f', a.token + 1n)).toEqual({ count: 1, sessions: ['s1'], bounds: [0] });
    expect(await redisCall(t.url, 'HGET', lockKeys(t.prefix, 'f').inf, 'r1')).toBe(`${a.token} s1 0`);
  });
});

describe('epochs and state loss', () => {
  it('open() creates the global epoch; bumpEpoch never lowers it', async () => {
    const h = await store.health();
    expect(h).toMatchObject({ ok: true, kind: 'redis' });
    const first = h.epoch;
    expect(first).not.toBeNull();
    const bumped = await store.bumpEpoch();
    expect(bumped.id).not.toBe(first?.id);
    expect(bumped.floor).toBeGreaterThanOrEqual(first?.floor ?? 0n);
    expect((await store.bumpEpoch()).floor).toBeGreaterThanOrEqual(bumped.floor);
  });

  it('after Redis lost the data, new tokens are above all old ones and old tokens are refused', async () => {
    const a = await grant('k');
    expect(await admit('k', a.token)).toMatchObject({ ok: true });
    await store.release('k', a.leaseId);
    await sleep(5);
    await dropRedisPrefix(t.url, t.prefix); // the epoch record and every lock key are gone
    expect(await admit('k', a.token)).toMatchObject({ ok: false, reason: 'forged' });
    const b = await grant('k');
    expect(b.token).toBeGreaterThan(a.token);
    expect(await admit('k', a.token)).toMatchObject({ ok: false, reason: 'stale' });
    expect((await store.health()).epoch).not.toBeNull(); // recreated by the grant
  });
});

describe('epoch floor on admission', () => {
  it('a floor raised by another process refuses tokens at or below it on the next admission, leaving no entry', async () => {
    const a = await grant('k');
    const b = await grant('k2');
    // The first admissions read the floor; later ones pass the floor last read and re-read it.
    expect(await admit('k', a.token)).toMatchObject({ ok: true });
    expect(await admit('k2', b.token)).toMatchObject({ ok: true });
    const { inf } = lockKeys(t.prefix, 'k');
    const before = Number(await redisCall(t.url, 'HLEN', inf));
    // Another process bumps the epoch (the floor moves at or above every token issued so far).
    await redisCall(t.url, 'HSET', `${t.prefix}:epoch`, 'id', 'other', 'floor', (b.token + 1n).toString());
    expect(await admit('k', a.token)).toMatchObject({ ok: false, reason: 'stale' });
    expect(await admit('k2', b.token)).toMatchObject({ ok: false, reason: 'stale' });
    expect(Number(await redisCall(t.url, 'HLEN', inf))).toBe(before);
    const c = await grant('k3');
    expect(c.token).toBeGreaterThan(b.token + 1n);
    expect(await admit('k3', c.token)).toMatchObject({ ok: true });
  });
});

describe('watch', () => {
  it('is subscribed when it resolves, and unsubscribes with the last listener', async () => {
    const { channel } = lockKeys(t.prefix, 'k');
    const numsub = async () => ((await redisCall(t.url, 'PUBSUB', 'NUMSUB', channel)) as [string, number])[1];
    let a = 0;
    let b = 0;
    const offA = await store.watch('k', () => a++);
    expect(await numsub()).toBe(1);
    const offB = await store.watch('k', () => b++);
    await redisCall(t.url, 'PUBLISH', channel, 'x');
    await waitFor(() => a === 1 && b === 1);
    offA();
    offA(); // idempotent
    await redisCall(t.url, 'PUBLISH', channel, 'x');
    await waitFor(() => b === 2);
    expect(a).toBe(1);
    expect(await numsub()).toBe(1);
    offB();
    await waitFor(async () => (await numsub()) === 0);
  });

  it('delivers across store instances (processes) sharing one Redis and prefix', async () => {
    const other = await openRedisStore(t.url, { namespace: t.prefix, allowVolatileRedis: true });
    try {
      const a = await grant('k');
      let calls = 0;
      const off = await other.watch('k', () => calls++);
      expect(await other.release('k', 'not-the-lease')).toEqual({ ok: false, reason: 'not-owner' });
      await store.release('k', a.leaseId);
      await waitFor(() => calls > 0);
      expect((await other.tryAcquire({ key: 'k', owner: 'o', ttlMs: 1000 })).ok).toBe(true);
      off();
    } finally {
      await other.close();
    }
  });

  it('notifies on finish()', async () => {
    const a = await grant('k');
    await store.admit({
      lock: 'k',
      token: a.token,
      check: 'token',
      requestId: 'r',
      session: 's',
      record: true,
    });
    let calls = 0;
    const off = await store.watch('k', () => calls++);
    await store.finish('k', 'r');
    await waitFor(() => calls > 0);
    expect((await store.lowerInflight('k', a.token + 1n)).count).toBe(0);
    off();
  });
});

const waitFor = (cond: () => boolean | Promise<boolean>, timeoutMs = 3000): Promise<void> =>
  waitUntil('condition', cond, { timeoutMs, everyMs: 10, message: 'timed out' });
