/**
 * /metrics of a started server (the same startServer the CLI runs): the series every
 * configured route, reason, outcome and breaker has from the start, what moves when
 * fenced, refused and unfenced traffic goes through, policy reloads by outcome, and
 * the whole page checked by `promtool check metrics` (Prometheus's own linter).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { DEFAULT_TOTAL_GAUGES } from '../../src/observe/metrics.js';
import { STORE_OPS } from '../../src/store/ops.js';
import { startSampleUpstream, type SampleUpstream } from '../../src/sample/index.js';
import { startServer, type RunningServer } from '../../src/serve.js';
import {
  acquire,
  dropRedisPrefix,
  policyYaml,
  randomNamespace,
  release,
  send,
  twoTokens,
  writeAtomically,
  type RouteSpec,
} from '../helpers/e2e.js';

const writes: RouteSpec = {
  name: 'order-writes',
  methods: ['PUT'],
  path: '/orders/:orderId',
  lock: 'order:{orderId}',
};
const reads: RouteSpec = { name: 'order-reads', methods: ['GET'], path: '/orders/*' };
const deletes: RouteSpec = {
  name: 'order-deletes',
  methods: ['DELETE'],
  path: '/orders/:orderId',
  lock: 'order:{orderId}',
  fencing: { enforce: false },
};

let upstream: SampleUpstream;
let dir: string;
let file: string;
let namespace: string;
let server: RunningServer;

async function page(): Promise<string> {
  const res = await fetch(`${server.control}/metrics`);
  expect(res.status).toBe(200);
  return res.text();
}

/** The value of the sample line `series` (name{labels} exactly as exported); undefined when absent. */
function value(text: string, series: string): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return undefined;
}

async function promtool(text: string): Promise<{ code: number | null; output: string }> {
  const proc = spawn('promtool', ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let output = '';
  proc.stdout.on('data', (d: Buffer) => (output += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (output += d.toString()));
  proc.stdin.end(text);
  const [code] = (await once(proc, 'exit')) as [number | null];
  return { code, output };
}

beforeAll(async () => {
  upstream = await startSampleUpstream({ port: 0 });
  dir = await mkdtemp(join(tmpdir(), 'fg-metrics-'));
  file = join(dir, 'policy.yaml');
  await writeAtomically(file, policyYaml(upstream.url, [writes, reads]));
  namespace = randomNamespace('fgmetrics');
  const config = resolveConfig({
    flags: {
      store: 'redis://127.0.0.1:6379',
      storeNamespace: namespace,
      allowVolatileRedis: true,
      listen: '127.0.0.1:0',
      control: '127.0.0.1:0',
      policies: file,
    },
  });
  server = await startServer(config);
}, 60_000);

afterAll(async () => {
  await server?.close();
  await upstream?.close();
  if (namespace) await dropRedisPrefix(namespace);
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('/metrics', () => {
  it('has every labelled series at zero from the start', async () => {
    const text = await page();
    for (const route of ['order-writes', 'order-reads', 'none']) {
      for (const c of ['1xx', '2xx', '3xx', '4xx', '5xx']) {
        expect(value(text, `fencegate_requests_total{route="${route}",status_class="${c}"}`)).toBe(0);
      }
    }
    for (const reason of ['stale', 'forged', 'missing', 'lease', 'malformed', 'unavailable']) {
      const series = `fencegate_fenced_writes_total{route="order-writes",reason="${reason}",enforced="true"}`;
      expect(value(text, series)).toBe(0);
    }
    // Unfenced routes get request series only.
    expect(text).not.toContain('fencegate_fenced_writes_total{route="order-reads"');
    expect(value(text, 'fencegate_admitted_writes_total{route="order-writes"}')).toBe(0);
    expect(value(text, 'fencegate_drain_timeouts_total{route="order-writes"}')).toBe(0);
    for (const [breaker, closed] of [
      ['store', 1],
      ['orders', 1],
    ] as const) {
      expect(value(text, `fencegate_breaker_state{breaker="${breaker}",state="closed"}`)).toBe(closed);
      expect(value(text, `fencegate_breaker_state{breaker="${breaker}",state="half_open"}`)).toBe(0);
      expect(value(text, `fencegate_breaker_state{breaker="${breaker}",state="open"}`)).toBe(0);
    }
    expect(value(text, 'fencegate_policy_reloads_total{outcome="success"}')).toBe(0);
    expect(value(text, 'fencegate_policy_reloads_total{outcome="failure"}')).toBe(0);
    for (const op of STORE_OPS) expect(value(text, `fencegate_store_errors_total{op="${op}"}`)).toBe(0);
    expect(value(text, 'fencegate_log_lines_suppressed_total')).toBe(0);
    expect(value(text, 'fencegate_lease_hold_duration_seconds_count{end="released"}')).toBe(0);
    expect(value(text, 'fencegate_lease_hold_duration_seconds_count{end="expired"}')).toBe(0);
    expect(value(text, 'fencegate_drain_wait_duration_seconds_count{outcome="timeout"}')).toBe(0);
  });

  it('moves with fenced, refused and unfenced traffic, and passes promtool check metrics', async () => {
    const [low, high] = await twoTokens(server.control, 'order:m1');
    expect((await send(server.data, 'PUT', '/orders/m1', { token: high.token })).status).toBe(201);
    expect((await send(server.data, 'PUT', '/orders/m1', { token: low.token })).status).toBe(409);
    expect((await send(server.data, 'GET', '/orders/m1')).status).toBe(200);
    expect((await send(server.data, 'GET', '/nowhere')).status).toBe(404);
    const held = await acquire(server.control, 'order:m2', 'metrics-test');
    await release(server.control, held);

    const text = await page();
    expect(value(text, 'fencegate_requests_total{route="order-writes",status_class="2xx"}')).toBe(1);
    expect(value(text, 'fencegate_requests_total{route="order-writes",status_class="4xx"}')).toBe(1);
    expect(value(text, 'fencegate_requests_total{route="order-reads",status_class="2xx"}')).toBe(1);
    expect(value(text, 'fencegate_requests_total{route="none",status_class="4xx"}')).toBe(1);
    expect(value(text, 'fencegate_admitted_writes_total{route="order-writes"}')).toBe(1);
    expect(
      value(text, 'fencegate_fenced_writes_total{route="order-writes",reason="stale",enforced="true"}'),
    ).toBe(1);
    expect(
      value(text, 'fencegate_upstream_request_duration_seconds_count{upstream="orders",status_class="2xx"}'),
    ).toBe(2);
    // Gateway and issuer store calls are timed alike. One admit: the stale write was refused
    // from the stale-write cache (the admitted write taught it), without a store call.
    expect(value(text, 'fencegate_store_operation_duration_seconds_count{op="admit"}')).toBe(1);
    expect(value(text, 'fencegate_store_operation_duration_seconds_count{op="tryAcquire"}')).toBe(3);
    expect(
      value(text, 'fencegate_store_operation_duration_seconds_count{op="release"}'),
    ).toBeGreaterThanOrEqual(1);
    expect(value(text, 'fencegate_lease_hold_duration_seconds_count{end="released"}')).toBeGreaterThanOrEqual(
      1,
    );

    // Prometheus conventions.
    expect(text).toMatch(/^process_resident_memory_bytes \d+/m);
    expect(text).toMatch(/^nodejs_eventloop_lag_seconds /m);
    expect(text).not.toMatch(/^fencegate_(process|nodejs)_/m);
    expect(text).not.toContain('fencegate_upstream_seconds');
    for (const name of DEFAULT_TOTAL_GAUGES) expect(text).not.toContain(`# TYPE ${name} `);
    for (const [, name] of text.matchAll(/^# TYPE (\S+) (?:gauge|histogram|summary)$/gm)) {
      expect(name).not.toMatch(/_total$/);
    }
    const checked = await promtool(text);
    expect(checked.output).toBe('');
    expect(checked.code).toBe(0);
  });

  it('counts policy reloads by outcome; a new route gets its series at 0', async () => {
    await writeAtomically(file, 'version: 1\nroutes: [\n');
    const failed = await server.reload('SIGHUP');
    expect(failed.ok).toBe(false);
    await writeAtomically(file, policyYaml(upstream.url, [writes, reads, deletes]));
    const loaded = await server.reload('SIGHUP');
    expect(loaded.ok).toBe(true);
    const text = await page();
    // The file watcher may have reloaded too; at least the two SIGHUP reloads are counted.
    expect(value(text, 'fencegate_policy_reloads_total{outcome="failure"}')).toBeGreaterThanOrEqual(1);
    expect(value(text, 'fencegate_policy_reloads_total{outcome="success"}')).toBeGreaterThanOrEqual(1);
    expect(
      value(text, 'fencegate_fenced_writes_total{route="order-deletes",reason="missing",enforced="false"}'),
    ).toBe(0);
    expect(value(text, 'fencegate_requests_total{route="order-deletes",status_class="2xx"}')).toBe(0);
    expect(value(text, 'fencegate_admitted_writes_total{route="order-deletes"}')).toBe(0);
  });
});
