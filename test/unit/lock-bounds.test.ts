/**
 * Every per-lock structure of the gateway and the issuer stays within its bound however
 * many distinct locks pass through it (issue 30: memory grew with the number of distinct
 * locks), evicting the entries its documentation names (docs/observability.md, "Bounded
 * per-lock memory"), and reports its size in fencegate_tracked_locks. Each test pushes the
 * bound plus more distinct locks (or leases, or finishes) through one structure at its
 * default bound, then checks the size and which entries went.
 */
import { getEventListeners } from 'node:events';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ADMISSION_HOLDS_KEPT, AdmissionHolds } from '../../src/gateway/admission-hold.js';
import { GatewaySessions, SessionLease, UNFINISHED_KEPT } from '../../src/gateway/session.js';
import { STALE_CACHE_LOCKS, StaleCache } from '../../src/gateway/stale-cache.js';
import { STALE_REFUSALS_KEPT, StaleRefusals } from '../../src/gateway/verdict.js';
import { eitherSignal, Issuer, MAX_TRACKED_GRANTS } from '../../src/issuer/service.js';
import { createMetrics, TRACKED_STRUCTURES } from '../../src/observe/metrics.js';
import { OwnerLookup } from '../../src/observe/owners.js';
import { faultyStore } from '../helpers/faulty-store.js';
import { MemoryStore } from '../helpers/memory-store.js';

const MORE = 1_000;
const log = { warn: () => undefined };

async function gauge(metrics: ReturnType<typeof createMetrics>, structure: string): Promise<number> {
  const text = await metrics.registry.getSingleMetricAsString('fencegate_tracked_locks');
  const want = `fencegate_tracked_locks{structure="${structure}"} `;
  const line = text.split('\n').find((l) => l.startsWith(want));
  return line === undefined ? NaN : Number(line.slice(want.length));
}

describe('per-lock structures stay bounded', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('stale-write cache: at most STALE_CACHE_LOCKS locks, the least recently raised forgotten', async () => {
    const cache = new StaleCache();
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.trackSize('stale-cache', () => cache.size);
    for (let i = 0; i < STALE_CACHE_LOCKS + MORE; i++) {
      cache.learn(`lock:${i}`, 5n, true, { ok: true, highest: 5n, lowerInflight: 0 });
    }
    expect(cache.size).toBe(STALE_CACHE_LOCKS);
    expect(cache.refuses(`lock:${MORE - 1}`, 1n)).toBeNull(); // forgotten: the store is asked
    expect(cache.refuses(`lock:${MORE}`, 1n)).not.toBeNull(); // the oldest kept
    expect(cache.refuses(`lock:${STALE_CACHE_LOCKS + MORE - 1}`, 1n)).not.toBeNull();
    expect(await gauge(metrics, 'stale-cache')).toBe(STALE_CACHE_LOCKS);
  });

  it('stale refusals: at most STALE_REFUSALS_KEPT locks, the oldest refusal forgotten', () => {
    const refusals = new StaleRefusals();
    const first = refusals.of('lock:0', 1n, 5n);
    for (let i = 1; i < STALE_REFUSALS_KEPT + MORE; i++) refusals.of(`lock:${i}`, 1n, 5n);
    expect(refusals.size).toBe(STALE_REFUSALS_KEPT);
    expect(refusals.of('lock:0', 1n, 5n)).not.toBe(first); // made anew: it had been forgotten
  });

  it('admission holds: at most ADMISSION_HOLDS_KEPT open, the one opened longest ago closed and finished', async () => {
    const holds = new AdmissionHolds(60_000);
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.trackSize('admission-holds', () => holds.size);
    const lease = new SessionLease('s1');
    lease.validUntil = Infinity;
    const finished: string[] = [];
    for (let i = 0; i < ADMISSION_HOLDS_KEPT + MORE; i++) {
      const lock = `lock:${i}`;
      const hold = holds.admitted(lock, 5n, lease, 5n, () => finished.push(lock), 1000);
      holds.open(hold);
      holds.leave(hold); // its write is over: the entry is finished when the hold closes
    }
    expect(holds.size).toBe(ADMISSION_HOLDS_KEPT);
    expect(finished).toEqual(Array.from({ length: MORE }, (_, i) => `lock:${i}`));
    expect(holds.join('lock:0', 5n, lease, 1000)).toBeNull(); // closed: asks the store
    expect(holds.join(`lock:${MORE}`, 5n, lease, 1000)).not.toBeNull(); // still open
    expect(await gauge(metrics, 'admission-holds')).toBe(ADMISSION_HOLDS_KEPT);
  });

  it('owner lookups: at most maxLocks locks cached, the least recently read dropped', async () => {
    const source = { recentGrants: async (key: string) => [{ token: 1n, owner: `owner-of-${key}` }] };
    const owners = new OwnerLookup(source, { maxLocks: 50 });
    for (let i = 0; i < 50 + MORE; i++)
      expect(await owners.owner(`lock:${i}`, '1')).toBe(`owner-of-lock:${i}`);
    expect(owners.size).toBe(50);
    const reads = owners.reads;
    expect(owners.owner(`lock:${50 + MORE - 1}`, '1')).toBe(`owner-of-lock:${50 + MORE - 1}`); // cached
    await owners.owner('lock:0', '1'); // dropped: read again
    expect(owners.reads).toBe(reads + 1);
  });

  it('issuer grants (hold times): at most MAX_TRACKED_GRANTS leases, the least recently granted forgotten', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const issuer = new Issuer(new MemoryStore(), metrics, {
      minTtlMs: 50,
      maxTtlMs: 600_000,
      maxWaitMs: 1000,
    });
    try {
      const signal = new AbortController().signal;
      const leases = [];
      for (let i = 0; i < MAX_TRACKED_GRANTS + MORE; i++) {
        const r = await issuer.acquire({ key: `lock:${i}`, owner: 'o', ttlMs: 600_000, waitMs: 0 }, signal);
        if (!r.ok) throw new Error('not granted');
        leases.push(r.lease);
      }
      expect(issuer.trackedGrants).toBe(MAX_TRACKED_GRANTS);
      expect(await gauge(metrics, 'issuer-grants')).toBe(MAX_TRACKED_GRANTS);
      // Nothing of a settled acquire stays on the issuer's long-lived signal nor the request's.
      expect(getEventListeners(issuer.closed, 'abort')).toHaveLength(0);
      expect(getEventListeners(signal, 'abort')).toHaveLength(0);
      // A forgotten grant is released unobserved; a kept one is observed.
      const observed = async () =>
        (await metrics.registry.getSingleMetricAsString('fencegate_lease_hold_duration_seconds'))
          .split('\n')
          .find((l) => l.startsWith('fencegate_lease_hold_duration_seconds_count{end="released"}'));
      await issuer.release(leases[0]!.key, leases[0]!.leaseId);
      expect(await observed()).toBe('fencegate_lease_hold_duration_seconds_count{end="released"} 0');
      const last = leases.at(-1)!;
      await issuer.release(last.key, last.leaseId);
      expect(await observed()).toBe('fencegate_lease_hold_duration_seconds_count{end="released"} 1');
    } finally {
      issuer.shutdown();
    }
  });

  it('eitherSignal: aborts with either signal, and once released leaves no listener on either', () => {
    const a = new AbortController();
    const b = new AbortController();
    const one = eitherSignal(a.signal, b.signal);
    b.abort();
    expect(one.signal.aborted).toBe(true);
    one.release();

    const c = new AbortController();
    const two = eitherSignal(c.signal, a.signal);
    expect(getEventListeners(a.signal, 'abort')).toHaveLength(1);
    two.release();
    expect(getEventListeners(a.signal, 'abort')).toHaveLength(0);
    expect(getEventListeners(c.signal, 'abort')).toHaveLength(0);
    c.abort();
    expect(two.signal.aborted).toBe(false); // released: no longer linked
  });

  it('unfinished finishes: at most UNFINISHED_KEPT; past it the session is given up, its entries with it', async () => {
    const inner = new MemoryStore();
    const store = faultyStore(inner);
    const metrics = createMetrics({ defaultMetrics: false });
    const sessions = new GatewaySessions(store, metrics, log, { ttlMs: 600 });
    metrics.trackSize('unfinished-finishes', () => sessions.unfinishedCount);
    await sessions.start();
    try {
      const lease = sessions.current();
      expect(lease).not.toBeNull();
      let cut = 0;
      lease!.track(() => cut++);
      store.failing.add('finish');
      for (let i = 0; i < UNFINISHED_KEPT + MORE; i++) sessions.finishLater(`lock:${i}`, `req-${i}`);
      expect(sessions.unfinishedCount).toBe(UNFINISHED_KEPT);
      expect(await gauge(metrics, 'unfinished-finishes')).toBe(UNFINISHED_KEPT);
      // At the next beat: the session is given up and ended in the store, a new one opened.
      const end = Date.now() + 5000;
      while ((sessions.current() === lease || sessions.current() === null) && Date.now() < end) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(sessions.current()).not.toBeNull();
      expect(sessions.current()).not.toBe(lease);
      expect(lease!.ended).toBe(true);
      expect(cut).toBe(1);
      expect(sessions.unfinishedCount).toBe(0);
      expect((await inner.readSessions([lease!.id])).size).toBe(0);
    } finally {
      store.failing.clear();
      await sessions.close();
    }
  });

  it('no metric has a label that could hold a lock key: every label name is one of the bounded kinds', () => {
    // Route, upstream and breaker names come from the policy; the rest are fixed values.
    const bounded = new Set([
      'route',
      'status_class',
      'reason',
      'enforced',
      'outcome',
      'end',
      'op',
      'action',
    ]);
    for (const l of ['upstream', 'breaker', 'state', 'structure']) bounded.add(l);
    // fencegate_build_info: one series per process, set once.
    for (const l of ['version', 'node']) bounded.add(l);
    const nodeDefaults = new Set(['kind', 'major', 'minor', 'patch', 'space', 'type', 'version']);
    const metrics = createMetrics();
    const names = new Set<string>();
    for (const metric of metrics.registry.getMetricsAsArray()) {
      const labels = (metric as unknown as { labelNames?: string[] }).labelNames ?? [];
      for (const label of labels) names.add(metric.name.startsWith('fencegate_') ? label : `node:${label}`);
    }
    const unexpected = [...names].filter(
      (n) => !(n.startsWith('node:') ? nodeDefaults.has(n.slice(5)) : bounded.has(n)),
    );
    expect(unexpected).toEqual([]);
    expect(names.has('route')).toBe(true); // the registry was read
  });

  it('fencegate_tracked_locks has a series for every structure, at 0 when none registered', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    for (const structure of TRACKED_STRUCTURES) expect(await gauge(metrics, structure)).toBe(0);
  });
});
