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
  const drain = (token: bigint, timeoutMs: number, signal = new AbortController().signal, own = lease()) =>
    awaitDrain(guard, observer, own, 'k', token, timeoutMs, signal);
  return { inner, store, guard, drain };
}

const admit = (s: MemoryStore, token: bigint, requestId: string, session = 'other') =>
  s.admit({ lock: 'k', token, check: 'token', requestId, session, record: true });

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
    const e = new InflightEntry(lease(), () => n++);
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
    const e = new InflightEntry(lease(), () => n++);
    e.clientClosed();
    e.forwarding();
    e.upstreamSettled();
    expect(n).toBe(1);
    expect(e.finished).toBe(true);
  });
});
