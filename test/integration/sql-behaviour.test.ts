/**
 * The Store semantics of src/store/types.ts on real Postgres and the real embedded
 * (LMDB) store. One store per backend for the file, a fresh key per test.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AcquireResult, Lease, Store } from '../../src/store/types.js';
import { embeddedFixture, postgresFixture, sleep, type SqlFixture } from '../helpers/sql-fixtures.js';

const FIXTURES: { name: string; open: () => Promise<SqlFixture> }[] = [
  { name: 'postgres', open: postgresFixture },
  { name: 'embedded', open: embeddedFixture },
];

function granted(r: AcquireResult): Lease {
  if (!r.ok) throw new Error(`expected a grant, got ${JSON.stringify(r)}`);
  return r.lease;
}

describe.each(FIXTURES)('SQL store behaviour: $name', ({ open }) => {
  let f: SqlFixture;
  let store: Store;
  let key: string;
  const k = (suffix = ''): string => `${key}${suffix}`;
  const acquire = (extra: Partial<Parameters<Store['tryAcquire']>[0]> = {}, owner = 'w1', ttlMs = 10_000) =>
    store.tryAcquire({ key: k(), owner, ttlMs, ...extra });

  beforeAll(async () => {
    f = await open();
    store = f.store;
  });
  afterAll(async () => {
    await f?.close();
  });
  // A fresh key per test (tests share the store).
  const fresh = (): void => {
    key = `k:${randomUUID()}`;
  };

  it('mints tokens above the key floor (store clock × 1000), strictly increasing', async () => {
    fresh();
    const before = BigInt(await store.now()) * 1000n;
    const a = granted(await acquire());
    expect(a.token).toBeGreaterThan(before);
    expect(typeof a.token).toBe('bigint');
    expect(await store.release(k(), a.leaseId)).toEqual({ ok: true });
    const b = granted(await acquire());
    expect(b.token).toBe(a.token + 1n);
    expect(b.leaseId).not.toBe(a.leaseId);
    const h = await store.health();
    expect(h.ok).toBe(true);
    expect(h.epoch?.floor).toBeLessThan(a.token);
  });

  it('refuses a second owner while the lease is live, with retryAfterMs ≤ lease remaining', async () => {
    fresh();
    granted(await acquire({}, 'w1', 5000));
    const r = await acquire({}, 'w2', 5000);
    expect(r.ok).toBe(false);
    if (r.ok || r.reason !== 'held') throw new Error(`expected held, got ${JSON.stringify(r)}`);
    expect(r.retryAfterMs).toBeGreaterThanOrEqual(1);
    expect(r.retryAfterMs).toBeLessThanOrEqual(5000);
  });

  it('replays by (key, requestId, owner) and never grants twice', async () => {
    fresh();
    const requestId = randomUUID();
    const a = granted(await acquire({ requestId }));
    const again = await acquire({ requestId });
    expect(again).toMatchObject({ ok: true, replayed: true, lease: { leaseId: a.leaseId, token: a.token } });
    // Another owner with the same request id is a different request: the lock is held.
    expect((await acquire({ requestId }, 'w2')).ok).toBe(false);
    // Renewed since: the replay shows the lease as it is now.
    const renewed = await store.renew(k(), a.leaseId, 20_000);
    expect(renewed.ok).toBe(true);
    const r2 = await acquire({ requestId });
    expect(r2.ok && r2.lease.expiresAt).toBe(renewed.ok && renewed.lease.expiresAt);
    // Released since: the replay says the lease ended; it neither grants anew nor
    // hands the dead lease out as live.
    await store.release(k(), a.leaseId);
    const r3 = await acquire({ requestId });
    expect(r3).toEqual({ ok: false, reason: 'replay-ended', leaseId: a.leaseId, token: a.token });
    expect((await store.inspect(k()))?.issued).toBe(a.token);
  });

  it('takes over a lapsed lease (tookOverExpired) and never renews it', async () => {
    fresh();
    const a = granted(await acquire({}, 'w1', 100));
    await sleep(150);
    expect(await store.renew(k(), a.leaseId, 10_000)).toEqual({ ok: false, reason: 'lease-lost' });
    expect((await store.inspect(k()))?.held).toBe(false);
    const b = await acquire({}, 'w2');
    expect(b).toMatchObject({ ok: true, replayed: false, tookOverExpired: true });
    const lb = granted(b);
    expect(lb.token).toBe(a.token + 1n);
    expect(await store.renew(k(), a.leaseId, 10_000)).toEqual({ ok: false, reason: 'lease-lost' });
    expect(await store.release(k(), a.leaseId)).toEqual({ ok: false, reason: 'not-owner' });
    const renewed = await store.renew(k(), lb.leaseId, 30_000);
    expect(renewed.ok && renewed.lease.token).toBe(lb.token);
    // Released cleanly: the next grant did not take anything over.
    await store.release(k(), lb.leaseId);
    expect(await acquire({}, 'w3')).toMatchObject({ ok: true, tookOverExpired: false });
  });

  it('releases a lapsed lease that was not replaced', async () => {
    fresh();
    const a = granted(await acquire({}, 'w1', 100));
    await sleep(150);
    expect(await store.release(k(), a.leaseId)).toEqual({ ok: true });
    expect(await acquire({}, 'w2')).toMatchObject({ ok: true, tookOverExpired: false });
  });

  it('serves waiters in FIFO order; attempts without waiterId never jump the queue', async () => {
    fresh();
    const a = granted(await acquire({}, 'holder'));
    await store.enqueueWaiter(k(), 'q1', 10_000);
    await store.enqueueWaiter(k(), 'q2', 10_000);
    expect((await store.inspect(k()))?.waiters).toBe(2);
    await store.release(k(), a.leaseId);
    const jumper = await acquire({}, 'jumper');
    expect(jumper.ok).toBe(false);
    expect(!jumper.ok && jumper.reason === 'held' && jumper.retryAfterMs).toBeGreaterThan(5000); // the head's deadline
    expect((await acquire({ waiterId: 'q2' }, 'o2')).ok).toBe(false);
    const w1 = granted(await acquire({ waiterId: 'q1' }, 'o1'));
    expect((await store.inspect(k()))?.waiters).toBe(1);
    // q2 is head now but the lock is held: held until w1's lease ends.
    const r = await acquire({ waiterId: 'q2' }, 'o2');
    expect(!r.ok && r.reason === 'held' && r.retryAfterMs).toBeLessThanOrEqual(10_000);
    await store.release(k(), w1.leaseId);
    granted(await acquire({ waiterId: 'q2' }, 'o2'));
    expect((await store.inspect(k()))?.waiters).toBe(0);
  });

  it('held retryAfterMs is the earlier of lease expiry and the deadline of the waiter ahead', async () => {
    fresh();
    granted(await acquire({}, 'holder', 8000));
    await store.enqueueWaiter(k(), 'short', 300);
    const r = await acquire({}, 'other');
    expect(r.ok).toBe(false);
    expect(!r.ok && r.reason === 'held' && r.retryAfterMs).toBeLessThanOrEqual(300);
    expect(!r.ok && r.reason === 'held' && r.retryAfterMs).toBeGreaterThanOrEqual(1);
  });

  it('ignores expired waiters and lets removed waiters go', async () => {
    fresh();
    await store.enqueueWaiter(k(), 'gone', 50);
    await store.enqueueWaiter(k(), 'leaving', 10_000);
    await store.removeWaiter(k(), 'leaving');
    await sleep(80);
    expect(await acquire({}, 'anyone')).toMatchObject({ ok: true });
    expect((await store.inspect(k()))?.waiters).toBe(0);
  });

  it('inspect and listLocks', async () => {
    fresh();
    expect(await store.inspect(k())).toBeNull();
    const a = granted(await acquire({}, 'alice'));
    const s = await store.inspect(k());
    expect(s).toEqual({
      key: k(),
      held: true,
      owner: 'alice',
      leaseId: a.leaseId,
      token: a.token,
      issued: a.token,
      expiresAt: a.expiresAt,
      waiters: 0,
      highest: null,
      shadowHighest: null,
    });
    const listed = (await store.listLocks({ limit: 1000, prefix: k(), after: null })).locks;
    expect(listed.find((l) => l.key === k())).toMatchObject({ held: true, token: a.token });
    expect((await store.listLocks({ limit: 1, prefix: '', after: null })).locks.length).toBeLessThanOrEqual(
      1,
    );
    await store.release(k(), a.leaseId);
    expect(await store.inspect(k())).toMatchObject({
      held: false,
      owner: null,
      leaseId: null,
      token: a.token,
    });
    expect(
      (await store.listLocks({ limit: 1000, prefix: k(), after: null })).locks.some((l) => l.key === k()),
    ).toBe(false);
  });

  it('admit: forged, stale, lease-expired, and the fence moves only when recorded', async () => {
    fresh();
    const session = randomUUID();
    await store.openSession(session, 60_000);
    const base = { check: 'token' as const, session, record: true };
    expect(await store.admit({ ...base, lock: k(), token: 5n, requestId: 'r0' })).toEqual({
      ok: false,
      reason: 'forged',
      highest: null,
    });
    // A 1.5 s lease: long enough to still be live at the lease check below on a loaded machine.
    const a = granted(await acquire({}, 'w1', 1500));
    expect(await store.admit({ ...base, lock: k(), token: a.token + 1n, requestId: 'r1' })).toMatchObject({
      ok: false,
      reason: 'forged',
    });
    expect(await store.admit({ ...base, lock: k(), token: 1n, requestId: 'r2' })).toMatchObject({
      ok: false,
      reason: 'stale',
    });
    // Shadow mode: verdict only.
    expect(
      await store.admit({ ...base, record: false, lock: k(), token: a.token, requestId: 'r3' }),
    ).toMatchObject({
      ok: true,
    });
    expect((await store.inspect(k()))?.highest).toBeNull();
    expect((await store.lowerInflight(k(), a.token + 10n)).count).toBe(0);
    // Lease check while live, then recorded.
    expect(
      await store.admit({ ...base, check: 'lease', lock: k(), token: a.token, requestId: 'r4' }),
    ).toMatchObject({ ok: true, highest: a.token, lowerInflight: 0 });
    expect((await store.inspect(k()))?.highest).toBe(a.token);
    await sleep(1600);
    expect(
      await store.admit({ ...base, check: 'lease', lock: k(), token: a.token, requestId: 'r5' }),
    ).toEqual({ ok: false, reason: 'lease-expired', highest: a.token });
    // A newer holder raises the fence; the old token is stale from then on.
    const b = granted(await acquire({}, 'w2'));
    expect(await store.admit({ ...base, lock: k(), token: b.token, requestId: 'r6' })).toMatchObject({
      ok: true,
      highest: b.token,
      lowerInflight: 1, // r4 (token a) is still in flight
    });
    expect(await store.admit({ ...base, lock: k(), token: a.token, requestId: 'r7' })).toEqual({
      ok: false,
      reason: 'stale',
      highest: b.token,
    });
    // Out of bigint's range: an answer, not a driver error.
    expect(await store.admit({ ...base, lock: k(), token: 2n ** 64n, requestId: 'r9' })).toMatchObject({
      ok: false,
      reason: 'forged',
      highest: b.token,
    });
    // check 'lease' with a token that is not the live lease's.
    expect(
      await store.admit({ ...base, check: 'lease', lock: k(), token: b.token - 1n, requestId: 'r8' }),
    ).toMatchObject({ ok: false });
  });

  it('drain barrier: lowerInflight counts entries of live sessions; finish and session end remove them', async () => {
    fresh();
    const [s1, s2] = [randomUUID(), randomUUID()];
    await store.openSession(s1, 60_000);
    await store.openSession(s2, 60_000);
    const base = { check: 'token' as const, record: true };
    const a = granted(await acquire({}, 'w1', 100));
    await store.admit({ ...base, lock: k(), token: a.token, requestId: 'slow', session: s1 });
    await store.admit({ ...base, lock: k(), token: a.token, requestId: 'gone', session: s2 });
    await sleep(150);
    const b = granted(await acquire({}, 'w2'));
    const s = await store.lowerInflight(k(), b.token);
    expect(s.count).toBe(2);
    expect([...s.sessions].sort()).toEqual([s1, s2].sort());
    await store.finish(k(), 'slow');
    expect(await store.lowerInflight(k(), b.token)).toEqual({ count: 1, sessions: [s2], bounds: [0] });
    // Ending the session removes its entries that were not delivering in the same transaction.
    expect(await store.endSession(s2, 0)).toBe(true);
    expect(await store.lowerInflight(k(), b.token)).toEqual({ count: 0, sessions: [], bounds: [] });
    expect(
      await store.admit({ ...base, lock: k(), token: b.token, requestId: 'b', session: s1 }),
    ).toMatchObject({ ok: true, lowerInflight: 0 });
    // An entry of a session that no longer exists never counts.
    await store.admit({ ...base, lock: k(), token: b.token, requestId: 'orphan', session: 'never-opened' });
    expect((await store.lowerInflight(k(), b.token + 1n)).count).toBe(1);
  });

  it('watch: release, removeWaiter and finish notify; unsubscribe stops it', async () => {
    fresh();
    let calls = 0;
    let other = 0;
    const stop = await store.watch(k(), () => calls++);
    const stopOther = await store.watch(k('-other'), () => other++);
    const waitFor = async (n: number): Promise<void> => {
      const end = Date.now() + 3000;
      while (calls < n && Date.now() < end) await sleep(5);
      expect(calls).toBeGreaterThanOrEqual(n);
    };
    const a = granted(await acquire());
    await store.release(k(), a.leaseId);
    await waitFor(1);
    await store.enqueueWaiter(k(), 'w', 1000);
    await store.removeWaiter(k(), 'w');
    await waitFor(2);
    await store.finish(k(), 'nothing');
    await waitFor(3);
    // A refused release changes nothing and needs no notification; other keys are not told.
    expect(other).toBe(0);
    stop();
    const before = calls;
    const b = granted(await acquire());
    await store.release(k(), b.leaseId);
    await sleep(100);
    expect(calls).toBe(before);
    stopOther();
  });

  it('bumpEpoch raises the floor: tokens minted after it are above, older ones are stale', async () => {
    fresh();
    const a = granted(await acquire());
    const before = await store.health();
    await sleep(5);
    const e = await store.bumpEpoch();
    expect(e.id).not.toBe(before.epoch?.id);
    expect(e.floor).toBeGreaterThanOrEqual(before.epoch?.floor ?? 0n);
    expect((await store.health()).epoch).toEqual(e);
    expect(
      await store.admit({
        lock: k(),
        token: a.token,
        check: 'token',
        requestId: 'x',
        session: 's',
        record: true,
      }),
    ).toMatchObject({ ok: false, reason: 'stale' });
    await store.release(k(), a.leaseId);
    const b = granted(await acquire());
    expect(b.token).toBe(e.floor + 1n);
  });

  it('exactly one of 20 concurrent attempts wins', async () => {
    fresh();
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => acquire({}, `c${i}`)));
    expect(results.filter((r) => r.ok)).toHaveLength(1);
  });

  it('the store clock is milliseconds since the epoch', async () => {
    const now = await store.now();
    expect(Number.isInteger(now)).toBe(true);
    expect(Math.abs(now - Date.now())).toBeLessThan(5000);
  });
});
