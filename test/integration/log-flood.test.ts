/**
 * Logs under load, through a real gateway: a flood of 10,000 stale writes keeps the
 * fenced-write log lines within the rate limit (the rest summarised and counted in
 * fencegate_log_lines_suppressed_total), the event log within its capacity, and the
 * heap flat. And the data listener's access log: on, off, sampled, and above its level.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { pino } from 'pino';
import { Pool } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { EventLog } from '../../src/observe/events.js';
import { fencedWriteLog } from '../../src/observe/log.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { sleep } from '../helpers/e2e.js';
import {
  mint,
  ordersPolicy,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from '../helpers/gateway-harness.js';
import { MemoryStore } from '../helpers/memory-store.js';

setFlagsFromString('--expose_gc');
const gc = runInNewContext('gc') as () => void;

/** A pino destination that keeps each line parsed. */
function capture() {
  const lines: Record<string, unknown>[] = [];
  return {
    lines,
    stream: { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) },
  };
}

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function gateway(opts: { level: string; accessLog: number; events?: EventLog }) {
  const log = capture();
  const store = new MemoryStore();
  const upstream: TestUpstream = await startUpstream();
  cleanups.push(() => upstream.close());
  const gw: TestGateway = await startGateway({
    store,
    policy: ordersPolicy(upstream.url),
    logger: pino({ level: opts.level }, log.stream),
    accessLog: opts.accessLog,
    ...(opts.events !== undefined ? { events: opts.events } : {}),
  });
  cleanups.push(() => gw.close());
  const pool = new Pool(gw.url, { connections: 16 });
  cleanups.push(() => pool.close());
  return { log, store, gw, pool };
}

/** `n` requests, `concurrency` at a time; returns the status counts. */
async function flood(pool: Pool, n: number, path: string, token: bigint | null, concurrency = 64) {
  const statuses = new Map<number, number>();
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next += 1;
      const res = await pool.request({
        method: 'PUT',
        path,
        headers: token === null ? {} : { 'fencing-token': String(token) },
        body: '{}',
      });
      await res.body.dump();
      statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return statuses;
}

describe('a flood of stale writes', () => {
  it('logs within the rate limit, keeps the event log bounded and the heap flat', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const sink = capture();
    const LIMIT = 10;
    const CAPACITY = 1000;
    const events = new EventLog({
      capacity: CAPACITY,
      logPerSecond: LIMIT,
      log: fencedWriteLog(pino({ level: 'info' }, sink.stream), metrics.logLinesSuppressed),
    });
    const { store, pool } = await gateway({ level: 'info', accessLog: 0, events });
    const low = await mint(store, 'order:1');
    const high = await mint(store, 'order:1');
    expect((await flood(pool, 1, '/orders/1', high.token)).get(200)).toBe(1);

    // Warm up (JIT, connections), then measure the heap around the flood itself.
    expect((await flood(pool, 1000, '/orders/1', low.token)).get(409)).toBe(1000);
    // The flood starts in a log window of its own: on a fast run the warm-up and the whole
    // flood fitted in one second, whose ten lines the warm-up had used, and none was logged.
    await sleep(1100);
    gc();
    const heapBefore = process.memoryUsage().heapUsed;
    const linesBefore = sink.lines.length;
    const started = performance.now();
    const statuses = await flood(pool, 10_000, '/orders/1', low.token);
    const seconds = (performance.now() - started) / 1000;
    expect(statuses.get(409)).toBe(10_000);
    gc();
    const heapAfter = process.memoryUsage().heapUsed;

    const lines = sink.lines.slice(linesBefore);
    const fenced = lines.filter((l) => typeof l.event === 'object');
    const summaries = lines.filter((l) => typeof l.suppressed === 'number');
    expect(fenced.length + summaries.length).toBe(lines.length);
    // At most LIMIT lines in each 1-second window the flood touched, plus one summary per window.
    const windows = Math.ceil(seconds) + 1;
    expect(fenced.length).toBeLessThanOrEqual(LIMIT * windows);
    expect(summaries.length).toBeLessThanOrEqual(windows);
    expect(fenced[0]).toMatchObject({ level: 40, msg: 'fenced-write: stale' });
    expect(fenced[0]?.event).toMatchObject({ route: 'order-writes', lock: 'order:1', reason: 'stale' });

    // The ring stays within its capacity; every write was still an event.
    expect(events.recent(100_000)).toHaveLength(CAPACITY);
    expect(events.total).toBe(11_000);

    // Heap: the ring (1000 events) and connection buffers, not 10,000 of anything.
    expect(heapAfter - heapBefore).toBeLessThan(16 * 1024 * 1024);

    // Nothing is lost from the count: once the window closes, the next write reports the
    // suppressed lines; logged + suppressed = every fenced write.
    await sleep(1100);
    expect((await flood(pool, 1, '/orders/1', low.token)).get(409)).toBe(1);
    const all = sink.lines;
    const logged = all.filter((l) => typeof l.event === 'object').length;
    const suppressed = all.reduce((n, l) => n + (typeof l.suppressed === 'number' ? l.suppressed : 0), 0);
    expect(logged + suppressed).toBe(events.total);
    expect((await metrics.logLinesSuppressed.get()).values[0]?.value).toBe(suppressed);
    expect(suppressed).toBeGreaterThan(0);
  }, 120_000);
});

describe('the data listener access log', () => {
  const accessLines = (lines: Record<string, unknown>[]) => lines.filter((l) => l.msg === 'request');

  it('writes one line per request with the listener, route, status and fence', async () => {
    const { log, store, pool } = await gateway({ level: 'info', accessLog: 1 });
    const lease = await mint(store, 'order:7');
    await flood(pool, 1, '/orders/7?x=secret', lease.token, 1);
    await flood(pool, 1, '/nowhere', null, 1);
    const lines = accessLines(log.lines);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({
      level: 30,
      listener: 'data',
      method: 'PUT',
      path: '/orders/7',
      route: 'order-writes',
      status: 200,
      fence: 'admitted',
      lock: 'order:7',
      token: String(lease.token),
    });
    expect(typeof lines[0]?.ms).toBe('number');
    expect(lines[1]).toMatchObject({ listener: 'data', path: '/nowhere', route: null, status: 404 });
    expect(JSON.stringify(lines)).not.toContain('secret'); // the query is not logged
  });

  it('writes nothing when off, or when the level is above info', async () => {
    for (const [level, accessLog] of [
      ['info', 0],
      ['warn', 1],
    ] as const) {
      const { log, pool, gw } = await gateway({ level, accessLog });
      expect((await flood(pool, 50, '/orders/1', null)).get(428)).toBe(50);
      expect(accessLines(log.lines)).toEqual([]);
      // Requests are counted all the same.
      const requests = await gw.metrics.requests.get();
      const fourxx = requests.values.find(
        (v) => v.labels.route === 'order-writes' && v.labels.status_class === '4xx',
      );
      expect(fourxx?.value).toBe(50);
    }
  });

  it('logs about the given share of requests when sampled', async () => {
    const { log, pool } = await gateway({ level: 'info', accessLog: 0.5 });
    await flood(pool, 400, '/orders/1', null);
    const n = accessLines(log.lines).length;
    // Binomial(400, 0.5): mean 200, standard deviation 10.
    expect(n).toBeGreaterThan(100);
    expect(n).toBeLessThan(300);
  });
});
