/** What GET /v1/upstreams reports of an upstream: counts, error rate inputs, latency, last error; workers merged. */
import { describe, expect, it } from 'vitest';
import { KEPT, mergeSummaries, UpstreamStats, WINDOW_MS } from '../../src/breakers/upstream-stats.js';

describe('UpstreamStats', () => {
  it('counts answers and failures by class, with latency percentiles and the last error', () => {
    const stats = new UpstreamStats();
    for (let i = 1; i <= 98; i++) stats.record('orders', 200, i);
    stats.record('orders', 503, 100);
    stats.record('orders', 0, 5000, { status: 504, message: 'upstream "orders" did not answer in time' });
    const s = stats.summaries()['orders'];
    expect(s).toMatchObject({
      requests: 100,
      errors: 2,
      statuses: { '2xx': 98, '5xx': 1, none: 1 },
      latencyMs: { p50: 50, p99: 100 },
      lastError: { status: 504, message: 'upstream "orders" did not answer in time' },
      windowS: WINDOW_MS / 1000,
    });
    expect(s?.latencyMs.mean).toBeCloseTo((98 * 99) / 2 / 100 + 51, 1);
  });

  it('covers the window only, and at most the last KEPT requests', () => {
    const stats = new UpstreamStats();
    for (let i = 0; i < KEPT + 10; i++) stats.record('a', 200, 1);
    expect(stats.summaries()['a']?.requests).toBe(KEPT);
    expect(stats.summaries(Date.now() + WINDOW_MS + 1)['a']?.requests).toBe(0);
  });

  it('adds the workers’ summaries: counts summed, the newest last error, the highest percentiles', () => {
    const a = new UpstreamStats();
    const b = new UpstreamStats();
    a.record('u', 200, 10);
    b.record('u', 502, 30);
    b.record('u', 200, 20);
    const m = mergeSummaries([a.summaries(), b.summaries()])['u'];
    expect(m).toMatchObject({
      requests: 3,
      errors: 1,
      statuses: { '2xx': 2, '5xx': 1 },
      lastError: { status: 502 },
    });
    expect(m?.latencyMs.mean).toBe(20);
    expect(m?.latencyMs.p99).toBe(30);
  });
});
