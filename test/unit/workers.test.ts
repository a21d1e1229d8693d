/**
 * The pure parts of serve --workers (docs/adr/0008-workers.md): how many processes run,
 * the setting's parsing, how the workers' metrics and breakers merge in the primary.
 */
import { availableParallelism } from 'node:os';
import { describe, expect, it } from 'vitest';
import { ConfigError, DEFAULTS, resolveConfig } from '../../src/config.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { worstBreakers } from '../../src/breakers/cluster-board.js';
import { UpstreamStats } from '../../src/breakers/upstream-stats.js';
import { aggregateMetrics, retire, type MetricsSnapshot } from '../../src/workers/metrics.js';
import { workerCount } from '../../src/workers/plan.js';

/** The value of one series in Prometheus text, or undefined. */
function value(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('serve --workers: the setting', () => {
  it('defaults to the CPUs available (null), takes auto or 1…256 from flags, environment and file', () => {
    expect(DEFAULTS.workers).toBeNull();
    expect(resolveConfig({}).workers).toBeNull();
    expect(resolveConfig({ flags: { workers: '3' } }).workers).toBe(3);
    expect(resolveConfig({ env: { FENCEGATE_WORKERS: '1' } }).workers).toBe(1);
    expect(resolveConfig({ env: { FENCEGATE_WORKERS: '4' }, flags: { workers: 'auto' } }).workers).toBeNull();
    for (const bad of ['0', '-1', '1.5', 'two', '257']) {
      expect(() => resolveConfig({ flags: { workers: bad } })).toThrow(ConfigError);
      expect(() => resolveConfig({ flags: { workers: bad } })).toThrow(
        /--workers: ".*" must be auto or an integer between 1 and 256/,
      );
    }
    expect(() => resolveConfig({ env: { FENCEGATE_WORKERS: 'many' } })).toThrow(
      /environment FENCEGATE_WORKERS/,
    );
  });

  it('runs the CPUs available by default, the number asked otherwise, on every store', () => {
    expect(workerCount({ workers: null })).toBe(availableParallelism());
    expect(workerCount({ workers: 3 })).toBe(3);
    expect(workerCount({ workers: 1 })).toBe(1);
  });
});

describe('serve --workers: metrics merged in the primary', () => {
  /** A worker's registry after `admitted` admitted writes and some store timings. */
  async function worker(admitted: number, storeSeconds: number[], breaker: 'closed' | 'open') {
    const m = createMetrics({ defaultMetrics: false });
    m.fenceOf('orders').admitted.n += admitted;
    m.requestsOf('orders')[2]!.n += admitted;
    for (const s of storeSeconds) m.storeOperationSeconds.cell({ op: 'admit' }).observe(s);
    m.setBreakerState('store', breaker);
    m.lockWaiters.set(2);
    return m.registry.getMetricsAsJSON();
  }

  it('sums counters and histogram buckets, takes the worst breaker state, sums gauges', async () => {
    const primary = createMetrics({ defaultMetrics: false });
    primary.tokensIssued.inc(5);
    const text = await aggregateMetrics([
      await primary.registry.getMetricsAsJSON(),
      await worker(3, [0.0002, 0.003], 'closed'),
      await worker(4, [0.003, 7], 'open'),
    ]);
    expect(value(text, 'fencegate_admitted_writes_total{route="orders"}')).toBe(7);
    expect(value(text, 'fencegate_requests_total{route="orders",status_class="2xx"}')).toBe(7);
    expect(value(text, 'fencegate_tokens_issued_total')).toBe(5);
    const h = 'fencegate_store_operation_duration_seconds';
    expect(value(text, `${h}_bucket{le="0.00025",op="admit"}`)).toBe(1);
    expect(value(text, `${h}_bucket{le="0.005",op="admit"}`)).toBe(3);
    expect(value(text, `${h}_bucket{le="5",op="admit"}`)).toBe(3);
    expect(value(text, `${h}_bucket{le="+Inf",op="admit"}`)).toBe(4);
    expect(value(text, `${h}_count{op="admit"}`)).toBe(4);
    expect(value(text, `${h}_sum{op="admit"}`)).toBeCloseTo(7.0062, 6);
    // 1 when any worker's breaker is in that state: the alert on == 1 still fires.
    expect(value(text, 'fencegate_breaker_state{breaker="store",state="open"}')).toBe(1);
    expect(value(text, 'fencegate_breaker_state{breaker="store",state="closed"}')).toBe(1);
    expect(value(text, 'fencegate_lock_waiters')).toBe(4);
  });

  it("keeps a dead worker's counters and histograms, not its gauges, so the sums never go down", async () => {
    const dead = await worker(6, [0.003], 'open');
    let retired = retire(Promise.resolve(null), dead);
    retired = retire(retired, await worker(2, [], 'closed'));
    const gone = (await retired) as MetricsSnapshot;
    const text = await aggregateMetrics([gone, await worker(1, [0.003], 'closed')]);
    expect(value(text, 'fencegate_admitted_writes_total{route="orders"}')).toBe(9);
    expect(value(text, 'fencegate_store_operation_duration_seconds_count{op="admit"}')).toBe(2);
    expect(value(text, 'fencegate_breaker_state{breaker="store",state="open"}')).toBe(0);
    expect(value(text, 'fencegate_lock_waiters')).toBe(2);
  });
});

describe('serve --workers: breakers in /v1/status', () => {
  it('shows the worst state of each breaker over the workers', () => {
    expect(
      worstBreakers([
        { store: 'closed', upstreams: { a: 'closed', b: 'half_open' } },
        { store: 'half_open', upstreams: { a: 'open', c: 'closed' } },
        { store: null, upstreams: { b: 'closed' } },
      ]),
    ).toEqual({ store: 'half_open', upstreams: { a: 'open', b: 'half_open', c: 'closed' }, stats: {} });
    expect(worstBreakers([])).toEqual({ store: null, upstreams: {}, stats: {} });
    // The upstreams' recent answers (GET /v1/upstreams): each worker's added up.
    const one = new UpstreamStats();
    const two = new UpstreamStats();
    one.record('a', 200, 4);
    two.record('a', 0, 8, { status: 504, message: 'late' });
    const merged = worstBreakers([
      { store: null, upstreams: { a: 'closed' }, stats: one.summaries() },
      { store: null, upstreams: { a: 'closed' }, stats: two.summaries() },
    ]);
    expect(merged.stats?.['a']).toMatchObject({
      requests: 2,
      errors: 1,
      latencyMs: { mean: 6, p99: 8 },
      lastError: { status: 504 },
    });
  });
});
