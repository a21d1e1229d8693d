import { describe, expect, it } from 'vitest';
import { awaitDrain } from '../../src/gateway/drain.js';
import { InflightEntry } from '../../src/gateway/inflight.js';
import { StoreGuard } from '../../src/gateway/store-guard.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { faultyStore } from '../helpers/faulty-store.js';
import { MemoryStore } from '../helpers/memory-store.js';

const log = { warn: () => undefined };

async function setup() {
  const inner = new MemoryStore();
  const store = faultyStore(inner);
  const guard = new StoreGuard(store, createMetrics({ defaultMetrics: false }), log, { timeoutMs: 500 });
  for (let i = 0; i < 3; i++) {
    const r = await inner.tryAcquire({ key: 'k', owner: 'o', ttlMs: 10_000 });
    if (r.ok) await inner.release('k', r.lease.leaseId);
  }
  return { inner, store, guard };
}

const admit = (s: MemoryStore, token: bigint, requestId: string, inflightTtlMs = 10_000) =>
  s.admit({ lock: 'k', token, check: 'token', requestId, inflightTtlMs, record: true });

describe('awaitDrain', () => {
  it('clears on the finish notification, without polling', async () => {
    const { inner, store, guard } = await setup();
    await admit(inner, 1n, 'a');
    await admit(inner, 2n, 'b');
    let finished = false;
    setTimeout(() => {
      finished = true;
      void inner.finish('k', 'a');
    }, 100);
    const outcome = await awaitDrain(guard, 'k', 2n, 5000, new AbortController().signal);
    expect(outcome).toBe('cleared');
    expect(finished).toBe(true); // cleared by the finish, not before it
    expect(store.calls.filter((c) => c === 'lowerInflight').length).toBeLessThanOrEqual(3);
    guard.shutdown();
  });

  it('a lower entry that is never finished stops counting at its deadline (crashed gateway)', async () => {
    const { inner, guard } = await setup();
    await admit(inner, 1n, 'a', 150);
    expect((await inner.lowerInflight('k', 2n)).count).toBe(1);
    // 'cleared', not 'timeout' (5 s): the entry stopped counting at its own deadline.
    expect(await awaitDrain(guard, 'k', 2n, 5000, new AbortController().signal)).toBe('cleared');
    expect((await inner.lowerInflight('k', 2n)).count).toBe(0);
    guard.shutdown();
  });

  it('times out, and can be aborted', async () => {
    const { inner, guard } = await setup();
    await admit(inner, 1n, 'a');
    expect(await awaitDrain(guard, 'k', 2n, 80, new AbortController().signal)).toBe('timeout');
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 50);
    expect(await awaitDrain(guard, 'k', 2n, 5000, abort.signal)).toBe('aborted');
    guard.shutdown();
  });

  it('does not wait for same-token or higher-token writes', async () => {
    const { inner, guard } = await setup();
    await admit(inner, 2n, 'a');
    await admit(inner, 3n, 'b');
    expect(await awaitDrain(guard, 'k', 2n, 50, new AbortController().signal)).toBe('cleared');
    guard.shutdown();
  });

  it('throws fence-unavailable when the store fails while waiting', async () => {
    const { inner, store, guard } = await setup();
    await admit(inner, 1n, 'a');
    store.down = true;
    await expect(awaitDrain(guard, 'k', 2n, 1000, new AbortController().signal)).rejects.toMatchObject({
      code: 'fence-unavailable',
    });
    guard.shutdown();
  });
});

describe('InflightEntry', () => {
  it('finishes exactly once, whatever happens', () => {
    let n = 0;
    const e = new InflightEntry(() => n++);
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
    const e = new InflightEntry(() => n++);
    e.clientClosed();
    e.forwarding();
    e.upstreamSettled();
    expect(n).toBe(1);
    expect(e.finished).toBe(true);
  });
});
