/**
 * The issuer's side of the metrics: hold time for every lease it granted, however the
 * lease ended (released, lapsed and taken over, lapsed unseen), and its store calls
 * timed and their failures counted like the gateway's.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Issuer } from '../../src/issuer/service.js';
import { createMetrics, type Metrics } from '../../src/observe/metrics.js';
import { faultyStore } from '../helpers/faulty-store.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { sleep, waitFor } from '../helpers/e2e.js';

let issuer: Issuer | null = null;
afterEach(() => issuer?.shutdown());

async function series(metrics: Metrics, name: string, labels: Record<string, string>): Promise<number> {
  const text = await metrics.registry.getSingleMetricAsString(name.replace(/_(count|sum)$/, ''));
  const want = `${name}{${Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(',')}} `;
  const line = text.split('\n').find((l) => l.startsWith(want));
  return line === undefined ? NaN : Number(line.slice(want.length));
}

const LIMITS = { minTtlMs: 50, maxTtlMs: 60_000, maxWaitMs: 10_000 };

describe('issuer metrics', () => {
  it('observes the hold time of a released lease as released', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    issuer = new Issuer(new MemoryStore(), metrics, LIMITS);
    const r = await issuer.acquire({ key: 'h:1', owner: 'a', ttlMs: 10_000, waitMs: 0 });
    if (!r.ok) throw new Error('not granted');
    expect((await issuer.release('h:1', r.lease.leaseId)).ok).toBe(true);
    expect(await series(metrics, 'fencegate_lease_hold_duration_seconds_count', { end: 'released' })).toBe(1);
    expect(await series(metrics, 'fencegate_lease_hold_duration_seconds_count', { end: 'expired' })).toBe(0);
    expect(issuer.trackedGrants).toBe(0);
  });

  it('observes a lease that lapsed and was taken over as expired, held for its TTL', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    issuer = new Issuer(new MemoryStore(), metrics, LIMITS);
    const first = await issuer.acquire({ key: 'h:2', owner: 'a', ttlMs: 100, waitMs: 0 });
    expect(first.ok).toBe(true);
    await sleep(150);
    const second = await issuer.acquire({ key: 'h:2', owner: 'b', ttlMs: 10_000, waitMs: 0 });
    expect(second.ok).toBe(true);
    expect(await series(metrics, 'fencegate_lease_hold_duration_seconds_count', { end: 'expired' })).toBe(1);
    expect(await series(metrics, 'fencegate_lease_hold_duration_seconds_sum', { end: 'expired' })).toBe(0.1);
    expect(issuer.trackedGrants).toBe(1);
  });

  it('observes a lease nobody released or took over as expired once it lapsed', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    issuer = new Issuer(new MemoryStore(), metrics, LIMITS);
    const r = await issuer.acquire({ key: 'h:3', owner: 'a', ttlMs: 120, waitMs: 0 });
    expect(r.ok).toBe(true);
    await waitFor(
      'the lapsed lease to be observed',
      async () =>
        (await series(metrics, 'fencegate_lease_hold_duration_seconds_count', { end: 'expired' })) === 1,
      5000,
    );
    expect(await series(metrics, 'fencegate_lease_hold_duration_seconds_sum', { end: 'expired' })).toBe(0.12);
    expect(issuer.trackedGrants).toBe(0);
  });

  it('observes a lease whose renewal found it lost as expired', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const store = new MemoryStore();
    issuer = new Issuer(store, metrics, LIMITS);
    const r = await issuer.acquire({ key: 'h:4', owner: 'a', ttlMs: 10_000, waitMs: 0 });
    if (!r.ok) throw new Error('not granted');
    await store.release('h:4', r.lease.leaseId); // ended behind this issuer's back
    expect((await issuer.renew('h:4', r.lease.leaseId, 10_000)).ok).toBe(false);
    expect(await series(metrics, 'fencegate_lease_hold_duration_seconds_count', { end: 'expired' })).toBe(1);
    expect((await metrics.leaseRenewFailures.get()).values[0]?.value).toBe(1);
  });

  it('times its store calls and counts the ones that fail', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const store = faultyStore(new MemoryStore());
    issuer = new Issuer(store, metrics, LIMITS);
    expect((await issuer.acquire({ key: 'e:1', owner: 'a', ttlMs: 1000, waitMs: 0 })).ok).toBe(true);
    store.failing.add('tryAcquire');
    await expect(issuer.acquire({ key: 'e:2', owner: 'a', ttlMs: 1000, waitMs: 0 })).rejects.toThrow(
      /injected/,
    );
    store.failing.delete('tryAcquire');
    expect(await series(metrics, 'fencegate_store_errors_total', { op: 'tryAcquire' })).toBe(1);
    expect(await series(metrics, 'fencegate_store_errors_total', { op: 'release' })).toBe(0);
    expect(
      await series(metrics, 'fencegate_store_operation_duration_seconds_count', { op: 'tryAcquire' }),
    ).toBe(2);
    // The instrumented store is the issuer's store: other calls pass through unchanged.
    expect(issuer.store.kind).toBe('embedded');
    expect(store.calls).toEqual(['tryAcquire', 'tryAcquire']);
  });
});
