import { describe, expect, it } from 'vitest';
import { awaitDrain } from '../../src/gateway/drain.js';
import { InflightEntry } from '../../src/gateway/inflight.js';
import { SessionObserver } from '../../src/gateway/observer.js';
import { SessionLease } from '../../src/gateway/session.js';
import { StoreGuard } from '../../src/gateway/store-guard.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { faultyStore } from '../helpers/faulty-store.js';
import { MemoryStore } from '../helpers/memory-store.js';

const log = { warn: () => undefined };

/** A lease of this process that stays valid for the test unless told otherwise. */
function lease(validForMs = 1e9): SessionLease {
  const l = new SessionLease('me');
  l.validUntil = performance.now() + validForMs;
  return l;
}

async function setup() {
  const inner = new MemoryStore();
  const store = faultyStore(inner);
  const guard = new StoreGuard(store, createMetrics({ defaultMetrics: false }), log, { timeoutMs: 500 });
  const observer = new SessionObserver(guard, log);
  for (let i = 0; i < 3; i++) {
    const r = await inner.tryAcquire({ key: 'k', owner: 'o', ttlMs: 10_000 });
    if (r.ok) await inner.release('k', r.lease.leaseId);
  }
  await inner.openSession('other', 60_000);
  const drain = (
    token: bigint,
    timeoutMs: number,
    signal = new AbortController().signal,
    own = lease(),
    onLockDelay?: (leftMs: number) => void,
  ) => awaitDrain({ guard, observer, lease: own, lock: 'k', token, timeoutMs, signal, onLockDelay });
  return { inner, store, guard, observer, drain };
}

const admit = (s: MemoryStore, token: bigint, requestId: string, session = 'other', deliveryBoundMs = 0) =>
  s.admit({ lock: 'k', token, check: 'token', requestId, session, record: true, deliveryBoundMs });

describe('awaitDrain', () => {
  it('clears on the finish notification, without polling', async () => {
    const { inner, store, guard, drain } = await setup();
    await admit(inner, 1n, 'a');
    await admit(inner, 2n, 'b');
    let finished = false;
    setTimeout(() => {
      finished = true;
      void inner.finish('k', 'a');
    }, 100);
    expect(await drain(2n, 5000)).toBe('cleared');
    expect(finished).toBe(true); // cleared by the finish, not before it
    expect(store.calls.filter((c) => c === 'lowerInflight').length).toBeLessThanOrEqual(3);
    guard.shutdown();
  });

  it('an entry whose gateway stopped beating is dropped once its session TTL passed unchanged (crashed gateway)', async () => {
    const { inner, guard, drain } = await setup();
    await inner.openSession('crashed', 150);
    await admit(inner, 1n, 'a', 'crashed');
    // 'cleared', not 'timeout' (5 s): the silent session was ended and its entry dropped.
    expect(await drain(2n, 5000)).toBe('cleared');
    expect(await inner.readSessions(['crashed'])).toEqual(new Map());
    expect((await inner.lowerInflight('k', 2n)).count).toBe(0);
    guard.shutdown();
  });

  it("a crashed gateway's delivering entry counts for its lock-delay after the session was ended, then is dropped", async () => {
    const { inner, guard, observer, drain } = await setup();
    await inner.openSession('crashed', 100);
    await admit(inner, 1n, 'a', 'crashed', 1000); // delivering: the upstream may take 1 s to apply it
    const delays: number[] = [];
    // Within its lock-delay (1.25 s from when the session was seen gone) the entry holds the barrier.
    expect(await drain(2n, 600, undefined, undefined, (left) => delays.push(left))).toBe('timeout');
    expect(await inner.readSessions(['crashed'])).toEqual(new Map()); // the session itself was ended
    expect(delays).toHaveLength(1);
    expect(delays[0]).toBeGreaterThan(0);
    expect(delays[0]).toBeLessThanOrEqual(1250);
    expect((await inner.lowerInflight('k', 2n)).count).toBe(1);
    // Past it, the entry is dropped and the barrier clears.
    expect(await drain(2n, 5000)).toBe('cleared');
    expect((await inner.lowerInflight('k', 2n)).count).toBe(0);
    expect(observer.delayLeft('crashed', 1000)).toBe(0);
    guard.shutdown();
  });

  it("a crashed gateway's entry that was not delivering stops counting with its session (no lock-delay)", async () => {
    const { inner, guard, drain } = await setup();
    await inner.openSession('crashed', 100);
    await admit(inner, 1n, 'a', 'crashed', 0); // it waited (barrier, body): never sent
    const delays: number[] = [];
    expect(await drain(2n, 600, undefined, undefined, (left) => delays.push(left))).toBe('cleared');
    expect(delays).toEqual([]);
    guard.shutdown();
  });

  it('an entry whose gateway keeps beating keeps counting, however long its request takes', async () => {
    const { inner, guard, drain } = await setup();
    await inner.openSession('alive', 150);
    const beating = setInterval(() => void inner.beatSession('alive'), 30);
    await admit(inner, 1n, 'a', 'alive');
    expect(await drain(2n, 700)).toBe('timeout');
    clearInterval(beating);
    expect((await inner.readSessions(['alive'])).has('alive')).toBe(true);
    expect((await inner.lowerInflight('k', 2n)).count).toBe(1);
    guard.shutdown();
  });

  it('an entry of a session that no longer exists does not count', async () => {
    const { inner, guard, drain } = await setup();
    await admit(inner, 1n, 'a', 'gone');
    expect(await drain(2n, 5000)).toBe('cleared');
    guard.shutdown();
  });

  it("times out, can be aborted, and stops when this process's own session lapses", async () => {
    const { inner, guard, drain } = await setup();
    await admit(inner, 1n, 'a');
    expect(await drain(2n, 80)).toBe('timeout');
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 50);
    expect(await drain(2n, 5000, abort.signal)).toBe('aborted');
    expect(await drain(2n, 5000, new AbortController().signal, lease(60))).toBe('lapsed');
    guard.shutdown();
  });

  it('does not wait for same-token or higher-token writes', async () => {
    const { inner, guard, drain } = await setup();
    await admit(inner, 2n, 'a');
    await admit(inner, 3n, 'b');
    expect(await drain(2n, 50)).toBe('cleared');
    guard.shutdown();
  });

  it('throws fence-unavailable when the store fails while waiting', async () => {
    const { inner, store, guard, drain } = await setup();
    await admit(inner, 1n, 'a');
    store.down = true;
    await expect(drain(2n, 1000)).rejects.toMatchObject({ code: 'fence-unavailable' });
    guard.shutdown();
  });
});

describe('InflightEntry', () => {
  it('finishes exactly once, whatever happens', () => {
    let n = 0;
    const e = new InflightEntry(lease(), () => n++, 0);
    e.forwarding();
    e.clientClosed(); // still at the upstream: not yet
    expect(n).toBe(0);
    e.upstreamSettled();
    e.upstreamSettled();
    e.clientClosed();
    e.finish();
    expect(n).toBe(1);
  });

  it('a client leaving before forwarding finishes it', () => {
    let n = 0;
    const e = new InflightEntry(lease(), () => n++, 0);
    e.clientClosed();
    e.forwarding();
    e.upstreamSettled();
    expect(n).toBe(1);
    expect(e.finished).toBe(true);
  });
});
