/**
 * One contract, every store: the same behaviour from the embedded, Postgres and
 * Redis backends. A backend that cannot be reached fails the run (never skipped).
 */
import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Issuer } from '../../src/issuer/service.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { GRANT_HISTORY, type Lease, type Store } from '../../src/store/types.js';
import { MAX_TOKEN } from '../../src/tokens.js';
import { STORE_FIXTURES, type Harness } from '../helpers/stores.js';
import { sleep, waitUntil } from '../helpers/wait.js';

async function grant(store: Store, key: string, owner = 'w', ttlMs = 10_000): Promise<Lease> {
  const r = await store.tryAcquire({ key, owner, ttlMs });
  if (!r.ok) throw new Error(`expected a grant for ${key}, got ${JSON.stringify(r)}`);
  return r.lease;
}

const until = (cond: () => Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> =>
  waitUntil(what, cond, { timeoutMs, everyMs: 10 });

describe.each(STORE_FIXTURES)('store contract: $name', (fixture) => {
  let h: Harness;
  let issuer: Issuer;
  beforeEach(async () => {
    h = await fixture.open();
    issuer = new Issuer(h.store, createMetrics({ defaultMetrics: false }));
  });
  afterEach(async () => {
    issuer.shutdown();
    await h.close();
  });

  it('tokens strictly increase per key under 8 concurrent clients × 200 grants', async () => {
    const keys = ['c:0', 'c:1', 'c:2', 'c:3'];
    const seen = new Map<string, bigint[]>(keys.map((k) => [k, []]));
    const client = async (c: number) => {
      for (let i = 0; i < 200; i++) {
        const key = keys[(c + i) % keys.length] as string;
        const r = await issuer.acquire({ key, owner: `client-${c}`, ttlMs: 30_000, waitMs: 60_000 });
        if (!r.ok) throw new Error(`client ${c} timed out on ${key}`);
        seen.get(key)?.push(r.lease.token); // recorded while holding: grant order
        const rel = await issuer.release(key, r.lease.leaseId);
        expect(rel.ok).toBe(true);
      }
    };
    await Promise.all(Array.from({ length: 8 }, (_, c) => client(c)));
    let total = 0;
    for (const [key, tokens] of seen) {
      total += tokens.length;
      for (let i = 1; i < tokens.length; i++) {
        if (!((tokens[i] as bigint) > (tokens[i - 1] as bigint))) {
          throw new Error(`${key}: token ${tokens[i]} after ${tokens[i - 1]} at grant ${i}`);
        }
      }
    }
    expect(total).toBe(1600);
  }, 180_000);

  it('keeps tokens exact above 2^53 and up to 2^63-1', async () => {
    const key = 'big:1';
    await grant(h.store, key).then((l) => h.store.release(key, l.leaseId));
    await h.seedIssued(key, 2n ** 53n + 5n);
    const a = await grant(h.store, key);
    expect(a.token).toBe(2n ** 53n + 6n);
    await h.store.release(key, a.leaseId);
    const b = await grant(h.store, key);
    expect(b.token).toBe(2n ** 53n + 7n);
    await h.store.release(key, b.leaseId);

    await h.seedIssued(key, MAX_TOKEN - 2n);
    const c = await grant(h.store, key);
    expect(c.token).toBe(MAX_TOKEN - 1n);
    expect((await h.store.inspect(key))?.token).toBe(MAX_TOKEN - 1n);
    await h.store.release(key, c.leaseId);
    const d = await grant(h.store, key);
    expect(d.token).toBe(MAX_TOKEN);
    const admitted = await h.store.admit({
      lock: key,
      token: MAX_TOKEN,
      check: 'token',
      requestId: randomUUID(),
      session: randomUUID(),
      record: true,
    });
    expect(admitted).toMatchObject({ ok: true, highest: MAX_TOKEN });
    // The last token was issued: every later attempt is refused as exhausted, changing nothing.
    await h.store.release(key, d.leaseId);
    expect(await h.store.tryAcquire({ key, owner: 'late', ttlMs: 10_000 })).toEqual({
      ok: false,
      reason: 'exhausted',
    });
    expect(await h.store.inspect(key)).toMatchObject({ held: false, issued: MAX_TOKEN });
    // (A new issuer: seeding the embedded store reopened it.)
    const fresh = new Issuer(h.store, createMetrics({ defaultMetrics: false }));
    expect(await fresh.acquire({ key, owner: 'late', ttlMs: 1000, waitMs: 500 })).toEqual({
      ok: false,
      reason: 'exhausted',
    });
    fresh.shutdown();
  });

  it('refuses a non-owner release and changes nothing', async () => {
    const key = 'owner:1';
    const a = await grant(h.store, key, 'alice');
    const before = await h.store.inspect(key);
    expect(await h.store.release(key, randomUUID())).toEqual({ ok: false, reason: 'not-owner' });
    expect(await h.store.release('owner:other', a.leaseId)).toEqual({ ok: false, reason: 'not-owner' });
    const after = await h.store.inspect(key);
    expect(after).toMatchObject({ held: true, owner: 'alice', token: a.token, leaseId: a.leaseId });
    expect(after?.expiresAt).toBe(before?.expiresAt);
    expect((await h.store.renew(key, a.leaseId, 10_000)).ok).toBe(true);
    expect(await h.store.release(key, a.leaseId)).toEqual({ ok: true });
    expect(await h.store.release(key, a.leaseId)).toEqual({ ok: false, reason: 'not-owner' });
  });

  it('never renews an expired lease, and never once another owner holds the lock', async () => {
    const key = 'renew:1';
    const a = await grant(h.store, key, 'alice', 150);
    await sleep(250);
    expect(await h.store.renew(key, a.leaseId, 10_000)).toEqual({ ok: false, reason: 'lease-lost' });
    const b = await h.store.tryAcquire({ key, owner: 'bob', ttlMs: 10_000 });
    expect(b).toMatchObject({ ok: true, tookOverExpired: true, lapsed: { owner: 'alice', token: a.token } });
    if (!b.ok) return;
    expect(b.lease.token).toBeGreaterThan(a.token);
    expect(await h.store.renew(key, a.leaseId, 10_000)).toEqual({ ok: false, reason: 'lease-lost' });
    expect(await h.store.release(key, a.leaseId)).toEqual({ ok: false, reason: 'not-owner' });
    expect(await h.store.inspect(key)).toMatchObject({ held: true, owner: 'bob', token: b.lease.token });
  });

  it('renews a live lease by the store clock', async () => {
    const key = 'renew:2';
    const a = await grant(h.store, key, 'alice', 300);
    const r = await h.store.renew(key, a.leaseId, 5000);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.lease.token).toBe(a.token);
    expect(r.lease.expiresAt).toBeGreaterThan(a.expiresAt);
    await sleep(400);
    expect((await h.store.inspect(key))?.held).toBe(true);
  });

  it('serves queued waiters in FIFO order', async () => {
    const key = 'fifo:1';
    const holder = await grant(h.store, key, 'holder');
    const order: string[] = [];
    const waiters: Promise<void>[] = [];
    for (let i = 0; i < 5; i++) {
      waiters.push(
        issuer.acquire({ key, owner: `w${i}`, ttlMs: 10_000, waitMs: 20_000 }).then(async (r) => {
          if (!r.ok) throw new Error(`w${i} timed out`);
          order.push(r.lease.owner);
          await sleep(5);
          await issuer.release(key, r.lease.leaseId);
        }),
      );
      await until(async () => (await h.store.inspect(key))?.waiters === i + 1, `waiter ${i} queued`);
    }
    await h.store.release(key, holder.leaseId);
    await Promise.all(waiters);
    expect(order).toEqual(['w0', 'w1', 'w2', 'w3', 'w4']);
  });

  it('wakes a waiter when the holder lease expires, without the holder releasing', async () => {
    const key = 'expiry:1';
    await grant(h.store, key, 'crashed', 200);
    const r = await issuer.acquire({ key, owner: 'next', ttlMs: 10_000, waitMs: 5000 });
    expect(r).toMatchObject({ ok: true, lease: { owner: 'next' } });
  });

  it('an acquire without a queue place never jumps queued waiters', async () => {
    const key = 'fair:1';
    const holder = await grant(h.store, key, 'holder');
    const waiterId = randomUUID();
    await h.store.enqueueWaiter(key, waiterId, 10_000);
    await h.store.release(key, holder.leaseId);
    expect(await h.store.tryAcquire({ key, owner: 'barger', ttlMs: 1000 })).toMatchObject({
      ok: false,
      reason: 'held',
    });
    const w = await h.store.tryAcquire({ key, owner: 'queued', ttlMs: 1000, waiterId });
    expect(w).toMatchObject({ ok: true, lease: { owner: 'queued' } });
    expect((await h.store.inspect(key))?.waiters).toBe(0);
  });

  it('forgets a queued waiter after its deadline (a crashed waiter does not block the lock)', async () => {
    const key = 'fair:2';
    await h.store.enqueueWaiter(key, randomUUID(), 150);
    expect((await h.store.tryAcquire({ key, owner: 'x', ttlMs: 1000 })).ok).toBe(false);
    await sleep(250);
    expect((await h.store.tryAcquire({ key, owner: 'x', ttlMs: 1000 })).ok).toBe(true);
  });

  it('a retried acquire with the same requestId does not grant twice', async () => {
    const key = 'idem:1';
    const requestId = randomUUID();
    const first = await h.store.tryAcquire({ key, owner: 'alice', ttlMs: 10_000, requestId });
    const again = await h.store.tryAcquire({ key, owner: 'alice', ttlMs: 10_000, requestId });
    expect(first).toMatchObject({ ok: true, replayed: false });
    expect(again).toMatchObject({ ok: true, replayed: true });
    if (!first.ok || !again.ok) return;
    expect(again.lease.leaseId).toBe(first.lease.leaseId);
    expect(again.lease.token).toBe(first.lease.token);
    expect((await h.store.inspect(key))?.issued).toBe(first.lease.token);
    // Another owner reusing the id gets no grant out of it.
    expect((await h.store.tryAcquire({ key, owner: 'mallory', ttlMs: 10_000, requestId })).ok).toBe(false);
    // After release, the replay says the lease ended: no new grant, and the dead lease
    // is not handed out as live.
    await h.store.release(key, first.lease.leaseId);
    const late = await h.store.tryAcquire({ key, owner: 'alice', ttlMs: 10_000, requestId });
    expect(late).toEqual({
      ok: false,
      reason: 'replay-ended',
      leaseId: first.lease.leaseId,
      token: first.lease.token,
    });
    expect((await h.store.inspect(key))?.issued).toBe(first.lease.token);
  });

  it('grants under the lease id the caller names (one id for several keys), renewed and released by it', async () => {
    const leaseId = randomUUID();
    const requestId = randomUUID();
    const a = await h.store.tryAcquire({ key: 'named:a', owner: 'alice', ttlMs: 10_000, leaseId, requestId });
    const b = await h.store.tryAcquire({ key: 'named:b', owner: 'alice', ttlMs: 10_000, leaseId });
    expect(a).toMatchObject({ ok: true, lease: { leaseId } });
    expect(b).toMatchObject({ ok: true, lease: { leaseId } });
    expect((await h.store.inspect('named:a'))?.leaseId).toBe(leaseId);
    // A replay answers the id first granted, whatever id the retry names.
    const again = await h.store.tryAcquire({
      key: 'named:a',
      owner: 'alice',
      ttlMs: 10_000,
      leaseId: randomUUID(),
      requestId,
    });
    expect(again).toMatchObject({ ok: true, replayed: true, lease: { leaseId } });
    expect(await h.store.renew('named:a', leaseId, 5000)).toMatchObject({ ok: true, lease: { leaseId } });
    expect(await h.store.release('named:a', leaseId)).toEqual({ ok: true });
    expect((await h.store.inspect('named:b'))?.held).toBe(true); // one key released, the other held
    expect(await h.store.release('named:b', leaseId)).toEqual({ ok: true });
  });

  it('refuses the replay of a lease that expired, and after another owner’s grant', async () => {
    const key = 'idem:2';
    const requestId = randomUUID();
    const first = await h.store.tryAcquire({ key, owner: 'alice', ttlMs: 150, requestId });
    if (!first.ok) throw new Error('expected a grant');
    await sleep(250);
    const ended = {
      ok: false,
      reason: 'replay-ended',
      leaseId: first.lease.leaseId,
      token: first.lease.token,
    };
    expect(await h.store.tryAcquire({ key, owner: 'alice', ttlMs: 10_000, requestId })).toEqual(ended);
    const bob = await grant(h.store, key, 'bob');
    expect(bob.token).toBe(first.lease.token + 1n);
    expect(await h.store.tryAcquire({ key, owner: 'alice', ttlMs: 10_000, requestId })).toEqual(ended);
    expect((await h.store.inspect(key))?.issued).toBe(bob.token);
  });

  it('notifies watchers of a grant, so waiters behind re-read the new lease', async () => {
    const key = 'watch:grant';
    let calls = 0;
    const off = await h.store.watch(key, () => calls++);
    await grant(h.store, key);
    await until(async () => calls > 0, 'a notification of the grant');
    off();
  });

  it('answers blockedBy: queue (not a held lease) when the lock is free but a waiter is ahead', async () => {
    const key = 'fair:3';
    const a = await grant(h.store, key);
    await h.store.release(key, a.leaseId);
    await h.store.enqueueWaiter(key, randomUUID(), 2000);
    expect(await h.store.tryAcquire({ key, owner: 'x', ttlMs: 1000 })).toMatchObject({
      ok: false,
      reason: 'held',
      blockedBy: 'queue',
    });
    expect((await h.store.inspect(key))?.held).toBe(false);
  });

  it('inspect answers null for a key never issued, and reports holder and waiters', async () => {
    expect(await h.store.inspect('never:1')).toBeNull();
    const a = await grant(h.store, 'insp:1', 'alice', 5000);
    await h.store.enqueueWaiter('insp:1', randomUUID(), 5000);
    const s = await h.store.inspect('insp:1');
    expect(s).toMatchObject({
      key: 'insp:1',
      held: true,
      owner: 'alice',
      token: a.token,
      issued: a.token,
      waiters: 1,
    });
    const listed = (await h.store.listLocks({ limit: 100, prefix: '', after: null })).locks;
    expect(listed.map((l) => l.key)).toContain('insp:1');
  });

  it('lists live locks a page at a time, in byte order, filtered by key prefix', async () => {
    const held = ['t:a/1', 't:a/2', 't:a/3', 't:a/4', 't:a/5', 't:b/1', 't:a/é'];
    for (const key of held) await grant(h.store, key, `owner-${key}`);
    const waiting = 't:a/0';
    await h.store.enqueueWaiter(waiting, randomUUID(), 10_000); // waiters but never issued: not listed
    const released = await grant(h.store, 't:a/9');
    await h.store.release('t:a/9', released.leaseId); // issued, no lease, no waiter: not listed
    const seen: string[] = [];
    let after: string | null = null;
    let pages = 0;
    do {
      const page = await h.store.listLocks({ limit: 2, prefix: 't:a/', after });
      expect(page.locks.length).toBeLessThanOrEqual(2);
      expect(page.now).toBeGreaterThan(0);
      for (const l of page.locks) {
        expect(l).toMatchObject({ held: true, owner: `owner-${l.key}`, waiters: 0 });
        expect(l.expiresAt).toBeGreaterThan(page.now);
        seen.push(l.key);
      }
      after = page.next;
      pages += 1;
    } while (after !== null && pages < 10);
    expect(seen).toEqual(['t:a/1', 't:a/2', 't:a/3', 't:a/4', 't:a/5', 't:a/é']);
    expect(pages).toBe(3);
    const all = await h.store.listLocks({ limit: 1000, prefix: 't:', after: null });
    expect(all.locks.map((l) => l.key)).toEqual([
      't:a/1',
      't:a/2',
      't:a/3',
      't:a/4',
      't:a/5',
      't:a/é',
      't:b/1',
    ]);
    expect(all.next).toBeNull();
    // a glob character in the prefix is matched literally
    await grant(h.store, 't:*x');
    expect(
      (await h.store.listLocks({ limit: 10, prefix: 't:*', after: null })).locks.map((l) => l.key),
    ).toEqual(['t:*x']);
    // a waiter on a key that has a token counts, and is listed with its waiters
    const w = await grant(h.store, 't:c/1');
    await h.store.release('t:c/1', w.leaseId);
    await h.store.enqueueWaiter('t:c/1', randomUUID(), 10_000);
    expect((await h.store.listLocks({ limit: 10, prefix: 't:c/', after: null })).locks).toMatchObject([
      { key: 't:c/1', held: false, waiters: 1 },
    ]);
  });

  it('remembers who was granted the last tokens of a key (recentGrants), and no more', async () => {
    expect(await h.store.recentGrants('owners:1')).toEqual([]);
    const tokens: bigint[] = [];
    for (let i = 0; i < GRANT_HISTORY + 3; i++) {
      const l = await grant(h.store, 'owners:1', `worker-${i}`);
      tokens.push(l.token);
      await h.store.release('owners:1', l.leaseId);
    }
    const recent = await h.store.recentGrants('owners:1');
    expect(recent).toHaveLength(GRANT_HISTORY);
    expect(recent[0]).toEqual({ token: tokens[tokens.length - 1], owner: `worker-${GRANT_HISTORY + 2}` });
    expect(recent[GRANT_HISTORY - 1]).toEqual({ token: tokens[3], owner: 'worker-3' });
    expect(recent.map((r) => r.token)).toEqual([...tokens].reverse().slice(0, GRANT_HISTORY));
    expect(await h.store.recentGrants('owners:2')).toEqual([]);
    const odd = await grant(h.store, 'owners:3', 'we%0Aird\nowner ü');
    expect(await h.store.recentGrants('owners:3')).toEqual([
      { token: odd.token, owner: 'we%0Aird\nowner ü' },
    ]);
  });

  it('watch() delivers a release to a subscriber', async () => {
    const key = 'watch:1';
    const a = await grant(h.store, key);
    let calls = 0;
    const off = await h.store.watch(key, () => calls++);
    await h.store.release(key, a.leaseId);
    await until(async () => calls > 0, 'a notification');
    off();
  });

  it('handles awkward keys: braces, slashes, unicode, 256 bytes', async () => {
    const keys = ['{a}', 'a}{b', 'tenant/{x}/order:1', 'ключ:日本', 'k'.repeat(256)];
    const tokens = new Set<bigint>();
    for (const key of keys) {
      const l = await grant(h.store, key);
      tokens.add(l.token);
      expect((await h.store.inspect(key))?.owner).toBe('w');
      expect(await h.store.release(key, l.leaseId)).toEqual({ ok: true });
    }
    expect(await h.store.inspect('a}')).toBeNull();
  });

  describe('fences', () => {
    let session = '';
    beforeEach(async () => {
      session = randomUUID();
      await h.store.openSession(session, 60_000);
    });

    const admit = (
      store: Store,
      lock: string,
      token: bigint,
      extra: Partial<Parameters<Store['admit']>[0]> = {},
    ) =>
      store.admit({
        lock,
        token,
        check: 'token',
        requestId: randomUUID(),
        session,
        record: true,
        ...extra,
      });

    it('admits the current token, refuses older (stale) and never-issued (forged) ones', async () => {
      const lock = 'f:1';
      expect(await admit(h.store, lock, 5n)).toMatchObject({ ok: false, reason: 'forged' });
      const a = await grant(h.store, lock, 'a', 100);
      await sleep(150);
      const b = await grant(h.store, lock, 'b');
      expect(await admit(h.store, lock, b.token)).toMatchObject({
        ok: true,
        highest: b.token,
        lowerInflight: 0,
      });
      expect(await admit(h.store, lock, a.token)).toMatchObject({
        ok: false,
        reason: 'stale',
        highest: b.token,
      });
      expect(await admit(h.store, lock, b.token + 1n)).toMatchObject({ ok: false, reason: 'forged' });
      expect(await admit(h.store, lock, b.token)).toMatchObject({ ok: true }); // same token again
      expect((await h.store.inspect(lock))?.highest).toBe(b.token);
    });

    it('a judge-only admission (record: false) gives the verdict and moves nothing', async () => {
      const lock = 'f:2';
      const a = await grant(h.store, lock, 'a', 100);
      await sleep(150);
      const b = await grant(h.store, lock, 'b');
      expect(await admit(h.store, lock, b.token, { record: false })).toMatchObject({ ok: true });
      expect((await h.store.inspect(lock))?.highest ?? null).toBeNull();
      expect(await admit(h.store, lock, a.token)).toMatchObject({ ok: true });
      expect(await admit(h.store, lock, a.token, { record: false })).toMatchObject({ ok: true });
      expect((await h.store.lowerInflight(lock, b.token)).count).toBe(1);
    });

    it('shadow admissions raise the shadow record alone; every admission judges against the higher of it and the fence', async () => {
      const lock = 'f:shadow';
      const a = await grant(h.store, lock, 'a', 100);
      await sleep(150);
      const b = await grant(h.store, lock, 'b', 100);
      await sleep(150);
      const c = await grant(h.store, lock, 'c', 100);
      await sleep(150);
      const d = await grant(h.store, lock, 'd');
      const shadow = { record: 'shadow' as const };
      expect(await admit(h.store, lock, b.token, shadow)).toEqual({
        ok: true,
        highest: b.token,
        lowerInflight: 0,
      });
      expect(await h.store.inspect(lock)).toMatchObject({ highest: null, shadowHighest: b.token });
      // Judged exactly as enforcement would judge it.
      expect(await admit(h.store, lock, a.token, shadow)).toEqual({
        ok: false,
        reason: 'stale',
        highest: b.token,
      });
      expect(await admit(h.store, lock, d.token + 1n, shadow)).toMatchObject({ ok: false, reason: 'forged' });
      expect(await admit(h.store, lock, b.token, shadow)).toMatchObject({ ok: true }); // same token again
      // Nothing in flight, no fence moved.
      expect((await h.store.lowerInflight(lock, d.token + 1n)).count).toBe(0);
      // Enforcement starts from what the shadow period saw (a route switched to enforce).
      expect(await admit(h.store, lock, a.token)).toEqual({ ok: false, reason: 'stale', highest: b.token });
      expect(await admit(h.store, lock, c.token)).toMatchObject({ ok: true, highest: c.token });
      expect(await h.store.inspect(lock)).toMatchObject({ highest: c.token, shadowHighest: b.token });
      // A shadow route sees what an enforced route on the same lock admitted.
      expect(await admit(h.store, lock, b.token, shadow)).toEqual({
        ok: false,
        reason: 'stale',
        highest: c.token,
      });
      expect(await admit(h.store, lock, d.token, shadow)).toMatchObject({ ok: true, highest: d.token });
      expect(await h.store.inspect(lock)).toMatchObject({ highest: c.token, shadowHighest: d.token });
    });

    it('a delivering entry counts on after its session ended, until dropped with its bound', async () => {
      const lock = 'f:delivered';
      const gone = randomUUID();
      const quiet = randomUUID();
      await h.store.openSession(gone, 60_000);
      await h.store.openSession(quiet, 60_000);
      const a = await grant(h.store, lock, 'a', 100);
      const sent = randomUUID();
      // Left at once (nothing lower in flight): the entry carries its bound from the admission.
      expect(
        await admit(h.store, lock, a.token, { session: gone, requestId: sent, deliveryBoundMs: 5000 }),
      ).toMatchObject({ ok: true, lowerInflight: 0 });
      // Not delivering (bound 0): an entry that waited, its write never sent.
      await admit(h.store, lock, a.token, { session: quiet, deliveryBoundMs: 0 });
      await sleep(150);
      const b = await grant(h.store, lock, 'b');
      expect(await h.store.lowerInflight(lock, b.token)).toEqual({
        count: 2,
        sessions: expect.arrayContaining([gone, quiet]),
        bounds: expect.any(Array),
      });
      expect(await h.store.endSession(gone, 0)).toBe(true);
      expect(await h.store.endSession(quiet, 0)).toBe(true);
      // What an observer does at once for ended sessions: drop the entries that were not
      // delivering. The quiet session's entry is gone; the delivering one counts on.
      await h.store.dropInflight(lock, [gone, quiet], 0);
      expect(await h.store.lowerInflight(lock, b.token)).toEqual({
        count: 1,
        sessions: [gone],
        bounds: [5000],
      });
      await h.store.dropInflight(lock, [gone], 4999); // a longer bound is not yet covered
      expect((await h.store.lowerInflight(lock, b.token)).count).toBe(1);
      await h.store.dropInflight(lock, [gone], 5000);
      expect(await h.store.lowerInflight(lock, b.token)).toEqual({ count: 0, sessions: [], bounds: [] });
    });

    it('an admission behind lower-token writes records no bound until it is delivered', async () => {
      const lock = 'f:deliver';
      const first = randomUUID();
      const second = randomUUID();
      await h.store.openSession(first, 60_000);
      await h.store.openSession(second, 60_000);
      const a = await grant(h.store, lock, 'a', 100);
      await admit(h.store, lock, a.token, { session: first, deliveryBoundMs: 3000 });
      await sleep(150);
      const b = await grant(h.store, lock, 'b', 100);
      const waiting = randomUUID();
      expect(
        await admit(h.store, lock, b.token, { session: second, requestId: waiting, deliveryBoundMs: 7000 }),
      ).toMatchObject({ ok: true, lowerInflight: 1 });
      await sleep(150);
      const c = await grant(h.store, lock, 'c');
      const bounds = async () => {
        const s = await h.store.lowerInflight(lock, c.token);
        return Object.fromEntries(s.sessions.map((id, i) => [id, s.bounds[i]]));
      };
      expect(await bounds()).toEqual({ [first]: 3000, [second]: 0 });
      expect(await h.store.deliver(lock, waiting, 7000)).toBe(true);
      expect(await bounds()).toEqual({ [first]: 3000, [second]: 7000 });
      expect(await h.store.deliver(lock, 'no-such-entry', 7000)).toBe(false);
      await h.store.finish(lock, waiting);
      expect(await h.store.deliver(lock, waiting, 7000)).toBe(false); // finished: gone
    });

    it('check "lease" refuses a token whose lease is not live now', async () => {
      const lock = 'f:3';
      const a = await grant(h.store, lock, 'a', 150);
      expect(await admit(h.store, lock, a.token, { check: 'lease' })).toMatchObject({ ok: true });
      await sleep(250);
      expect(await admit(h.store, lock, a.token, { check: 'lease' })).toMatchObject({
        ok: false,
        reason: 'lease-expired',
      });
      expect(await admit(h.store, lock, a.token, { check: 'token' })).toMatchObject({ ok: true });
    });

    it('counts lower-token writes in flight until they finish or their gateway session ends', async () => {
      const lock = 'f:4';
      const other = randomUUID();
      await h.store.openSession(other, 60_000);
      const a = await grant(h.store, lock, 'a', 100);
      const r1 = randomUUID();
      const r2 = randomUUID();
      expect(await admit(h.store, lock, a.token, { requestId: r1 })).toMatchObject({
        ok: true,
        lowerInflight: 0,
      });
      expect(await admit(h.store, lock, a.token, { requestId: r2, session: other })).toMatchObject({
        ok: true,
      });
      await sleep(150);
      const b = await grant(h.store, lock, 'b');
      let notified = 0;
      const off = await h.store.watch(lock, () => notified++);
      expect(await admit(h.store, lock, b.token)).toMatchObject({ ok: true, lowerInflight: 2 });
      const state = await h.store.lowerInflight(lock, b.token);
      expect(state.count).toBe(2);
      expect([...state.sessions].sort()).toEqual([session, other].sort());
      await h.store.finish(lock, r1);
      await until(async () => notified > 0, 'finish notification');
      expect(await h.store.lowerInflight(lock, b.token)).toEqual({
        count: 1,
        sessions: [other],
        bounds: [0],
      });
      // Entries never lapse by time: only their session ending stops them counting.
      await sleep(300);
      expect((await h.store.lowerInflight(lock, b.token)).count).toBe(1);
      const seen = notified;
      expect(await h.store.endSession(other, 0)).toBe(true);
      await h.store.dropInflight(lock, [other], 0);
      await until(async () => notified > seen, 'drop notification');
      expect(await h.store.lowerInflight(lock, b.token)).toEqual({ count: 0, sessions: [], bounds: [] });
      off();
    });

    it('gateway sessions: beats count up, ending is a compare-and-delete on the beat, and final', async () => {
      const id = randomUUID();
      expect(await h.store.beatSession(id)).toMatchObject({ alive: false });
      await h.store.openSession(id, 4000);
      expect(await h.store.readSessions([id, 'nobody'])).toEqual(new Map([[id, { beat: 0, ttlMs: 4000 }]]));
      const beat = await h.store.beatSession(id);
      expect(beat.alive).toBe(true);
      expect(Math.abs(beat.now - (await h.store.now()))).toBeLessThan(5000);
      await h.store.beatSession(id);
      expect((await h.store.readSessions([id])).get(id)).toEqual({ beat: 2, ttlMs: 4000 });
      expect((await h.store.readSessions(null)).get(id)).toEqual({ beat: 2, ttlMs: 4000 });
      expect(await h.store.endSession(id, 1)).toBe(false); // it beat since: alive
      expect(await h.store.endSession(id, 2)).toBe(true);
      expect(await h.store.endSession(id, 2)).toBe(false);
      expect(await h.store.beatSession(id)).toMatchObject({ alive: false });
      expect(await h.store.readSessions([id])).toEqual(new Map());
      const own = randomUUID();
      await h.store.openSession(own, 4000);
      await h.store.beatSession(own);
      expect(await h.store.endSession(own, null)).toBe(true); // the owner's own shutdown
    });

    it('a bumped epoch puts every later token above the floor and refuses older ones', async () => {
      const lock = 'f:5';
      const a = await grant(h.store, lock, 'a');
      expect(await admit(h.store, lock, a.token)).toMatchObject({ ok: true });
      await sleep(5); // the floor is the store clock in ms × 1000: let a millisecond pass
      const epoch = await h.store.bumpEpoch();
      expect(epoch.floor).toBeGreaterThanOrEqual(a.token);
      await h.store.release(lock, a.leaseId);
      const b = await grant(h.store, lock, 'b');
      expect(b.token).toBeGreaterThan(epoch.floor);
      expect(await admit(h.store, lock, a.token)).toMatchObject({ ok: false, reason: 'stale' });
      expect(await admit(h.store, lock, b.token)).toMatchObject({ ok: true });
      const health = await h.store.health();
      expect(health).toMatchObject({ ok: true, epoch: { id: epoch.id, floor: epoch.floor } });
    });

    it('a bump ends the leases it supersedes: not renewable, not live, not replayed', async () => {
      const lock = 'f:bumped-lease';
      const a = await h.store.tryAcquire({ key: lock, owner: 'a', ttlMs: 60_000, requestId: 'ra' });
      if (!a.ok) throw new Error('expected a grant');
      expect(await h.store.renew(lock, a.lease.leaseId, 60_000)).toMatchObject({ ok: true });
      await sleep(5);
      await h.store.bumpEpoch();
      // Its holder is fenced out (its token is below the floor): told at its next renewal.
      expect(await h.store.renew(lock, a.lease.leaseId, 60_000)).toEqual({ ok: false, reason: 'lease-lost' });
      expect(await h.store.inspect(lock)).toMatchObject({ held: false });
      expect(
        await h.store.tryAcquire({ key: lock, owner: 'a', ttlMs: 60_000, requestId: 'ra' }),
      ).toMatchObject({
        ok: false,
        reason: 'replay-ended',
      });
      // Everyone else gets the lock at once, not after the superseded lease's TTL.
      const b = await grant(h.store, lock, 'b');
      expect(b.token).toBeGreaterThan(a.lease.token);
    });

    it("another process's epoch bump is a reset here, seen at the next admission; this process's own view is not", async () => {
      const lock = 'f:reset';
      const resets: string[] = [];
      const off = h.store.onReset((r) => resets.push(r.reason));
      const a = await grant(h.store, lock, 'a');
      expect(await admit(h.store, lock, a.token)).toMatchObject({ ok: true });
      expect(resets).toEqual([]);
      const other = await h.another();
      await sleep(5);
      const bumped = await other.bumpEpoch();
      await h.store.release(lock, a.leaseId);
      const b = await grant(h.store, lock, 'b');
      expect(await admit(h.store, lock, b.token)).toMatchObject({ ok: true });
      expect(resets.length).toBeGreaterThan(0);
      expect(b.token).toBeGreaterThan(bumped.floor);
      off();
    });
  });

  describe('idempotency records', () => {
    const begin = (store: Store, key: string, fingerprint: string, attempt: string, holdMs = 60_000) =>
      store.beginIdempotent({ key, fingerprint, attempt, holdMs });
    const bytes = (...b: number[]) => new Uint8Array(b);

    it('begins once; a retry is in flight, then replayed; another fingerprint is a mismatch throughout', async () => {
      const other = await h.another();
      const key = 'route\nk-1';
      expect(await begin(h.store, key, 'fp-a', 'at-1')).toEqual({ state: 'begun' });
      const inflight = await begin(other, key, 'fp-a', 'at-2');
      expect(inflight.state).toBe('in-flight');
      if (inflight.state === 'in-flight') {
        expect(inflight.retryAfterMs).toBeGreaterThanOrEqual(1);
        expect(inflight.retryAfterMs).toBeLessThanOrEqual(60_000);
      }
      expect(await begin(other, key, 'fp-b', 'at-3')).toEqual({ state: 'mismatch' });
      // Only the attempt that holds the key finishes it.
      expect(await other.finishIdempotent({ key, attempt: 'at-2', response: bytes(9), ttlMs: 60_000 })).toBe(
        false,
      );
      const response = bytes(0, 1, 2, 255, 0, 10, 13);
      expect(await h.store.finishIdempotent({ key, attempt: 'at-1', response, ttlMs: 60_000 })).toBe(true);
      expect(
        await h.store.finishIdempotent({ key, attempt: 'at-1', response: bytes(1), ttlMs: 60_000 }),
      ).toBe(false);
      const done = await begin(other, key, 'fp-a', 'at-4');
      expect(done.state).toBe('done');
      if (done.state === 'done') expect([...done.response]).toEqual([...response]);
      expect(await begin(h.store, key, 'fp-b', 'at-5')).toEqual({ state: 'mismatch' });
      // Abandoning a done record changes nothing.
      await h.store.abandonIdempotent(key, 'at-1');
      expect((await begin(h.store, key, 'fp-a', 'at-6')).state).toBe('done');
    });

    it('an abandoned attempt frees the key; another attempt cannot abandon it', async () => {
      const key = 'k-abandon';
      expect(await begin(h.store, key, 'fp', 'at-1')).toEqual({ state: 'begun' });
      await h.store.abandonIdempotent(key, 'at-other');
      expect((await begin(h.store, key, 'fp', 'at-2')).state).toBe('in-flight');
      await h.store.abandonIdempotent(key, 'at-1');
      // Free again: even another fingerprint begins (nothing was done under the key).
      expect(await begin(h.store, key, 'fp-2', 'at-3')).toEqual({ state: 'begun' });
      expect(
        await h.store.finishIdempotent({ key, attempt: 'at-1', response: bytes(1), ttlMs: 60_000 }),
      ).toBe(false);
    });

    it('an attempt whose hold passed is taken over, and can no longer finish', async () => {
      const other = await h.another();
      const key = 'k-hold';
      expect(await begin(h.store, key, 'fp', 'crashed', 150)).toEqual({ state: 'begun' });
      await until(async () => (await begin(other, key, 'fp', 'retry')).state === 'begun', 'the hold to pass');
      expect(
        await h.store.finishIdempotent({ key, attempt: 'crashed', response: bytes(1), ttlMs: 60_000 }),
      ).toBe(false);
      expect(await other.finishIdempotent({ key, attempt: 'retry', response: bytes(2), ttlMs: 60_000 })).toBe(
        true,
      );
      const done = await begin(h.store, key, 'fp', 'late');
      expect(done.state === 'done' && [...done.response]).toEqual([2]);
    });

    it('a done record expires after its ttl, and the key begins afresh', async () => {
      const key = 'k-ttl';
      expect(await begin(h.store, key, 'fp', 'at-1')).toEqual({ state: 'begun' });
      expect(await h.store.finishIdempotent({ key, attempt: 'at-1', response: bytes(7), ttlMs: 150 })).toBe(
        true,
      );
      expect((await begin(h.store, key, 'fp', 'at-2', 150)).state).toMatch(/^(done|begun)$/);
      await until(
        async () => (await begin(h.store, key, 'other-fp', 'at-3')).state === 'begun',
        'the ttl to pass',
      );
    });

    it('of concurrent begins of one key from two processes, exactly one begins', async () => {
      const other = await h.another();
      for (let round = 0; round < 5; round++) {
        const key = `k-race-${round}`;
        const results = await Promise.all(
          Array.from({ length: 12 }, (_, i) => begin(i % 2 === 0 ? h.store : other, key, 'fp', `at-${i}`)),
        );
        expect(results.filter((r) => r.state === 'begun')).toHaveLength(1);
        expect(results.filter((r) => r.state === 'in-flight')).toHaveLength(11);
      }
    });

    it('keeps responses byte for byte (empty, 1 MiB) under awkward keys', async () => {
      const big = new Uint8Array(1024 * 1024);
      for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) & 0xff;
      const keys = ['a}b{c', 'ünïcödé 🔒 key', `r\n${'x'.repeat(500)}`, '%7B%25'];
      for (const [i, key] of keys.entries()) {
        const response = i === 0 ? new Uint8Array(0) : big;
        expect(await begin(h.store, key, 'fp', `at-${i}`)).toEqual({ state: 'begun' });
        expect(await h.store.finishIdempotent({ key, attempt: `at-${i}`, response, ttlMs: 60_000 })).toBe(
          true,
        );
        const done = await begin(h.store, key, 'fp', `again-${i}`);
        expect(done.state).toBe('done');
        if (done.state === 'done')
          expect(Buffer.from(done.response).equals(Buffer.from(response))).toBe(true);
      }
      // Keys are distinct records: one that only differs by escaping is another key.
      expect(await begin(h.store, '%7D', 'fp', 'x')).toEqual({ state: 'begun' });
    });
  });
});
