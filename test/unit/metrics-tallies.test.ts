/**
 * The hot-path metric forms (Tallies, HistogramCells) export exactly what prom-client's
 * own counters and histograms export for the same events.
 */
import { Counter, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/observe/metrics.js';

const STORE_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
];

describe('hot-path metric forms', () => {
  it('a histogram of cells exports what prom-client exports for the same observations', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const reference = new Registry();
    const plain = new Histogram({
      name: 'fencegate_store_operation_duration_seconds',
      help: 'x',
      labelNames: ['op'],
      buckets: STORE_BUCKETS,
      registers: [reference],
    });
    const values = [0, 0.0001, 0.00011, 0.003, 0.2, 0.5, 4.9, 5, 7, 120];
    for (const [i, v] of values.entries()) {
      const op = i % 3 === 0 ? 'admit' : 'finish';
      metrics.storeOperationSeconds.cell({ op }).observe(v);
      plain.observe({ op }, v);
    }
    const body = (text: string) => text.split('\n').filter((l) => !l.startsWith('#'));
    expect(
      body(await metrics.registry.getSingleMetricAsString('fencegate_store_operation_duration_seconds')),
    ).toEqual(body(await reference.getSingleMetricAsString('fencegate_store_operation_duration_seconds')));
  });

  it('upstream timings: one series per upstream and status class, no answer as error', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.upstreamTiming('orders', 2).observe(0.002);
    metrics.upstreamTiming('orders', 2).observe(0.004);
    metrics.upstreamTiming('orders', 0).observe(1);
    metrics.upstreamTiming('orders', 9).observe(1); // not a status class: counted as error
    const text = await metrics.registry.getSingleMetricAsString(
      'fencegate_upstream_request_duration_seconds',
    );
    expect(text).toContain(
      'fencegate_upstream_request_duration_seconds_count{upstream="orders",status_class="2xx"} 2',
    );
    expect(text).toContain(
      'fencegate_upstream_request_duration_seconds_count{upstream="orders",status_class="error"} 2',
    );
    expect(text.match(/_count\{/g)).toHaveLength(2);
  });

  it('a counter of tallies exports what prom-client exports, zero series included', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const reference = new Registry();
    const plain = new Counter({
      name: 'fencegate_admitted_writes_total',
      help: 'x',
      labelNames: ['route'],
      registers: [reference],
    });
    const a = metrics.fenceOf('a').admitted;
    metrics.fenceOf('b');
    plain.inc({ route: 'a' }, 0);
    plain.inc({ route: 'b' }, 0);
    for (let i = 0; i < 3; i++) {
      a.n += 1;
      plain.inc({ route: 'a' });
    }
    const body = (text: string) => text.split('\n').filter((l) => !l.startsWith('#'));
    const read = () => metrics.registry.getSingleMetricAsString('fencegate_admitted_writes_total');
    expect(body(await read())).toEqual(
      body(await reference.getSingleMetricAsString('fencegate_admitted_writes_total')),
    );
    // Scrapes publish only what is new.
    a.n += 2;
    expect(await read()).toContain('fencegate_admitted_writes_total{route="a"} 5');
    expect(await read()).toContain('fencegate_admitted_writes_total{route="a"} 5');
  });
});
