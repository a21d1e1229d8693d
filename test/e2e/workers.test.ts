/**
 * `fencegate serve --workers 2` on a Redis store (the shared server, a fresh namespace):
 * two worker processes share the data listener (round-robin over connections) and the
 * store; the primary serves the control API. docs/adr/0008-workers.md.
 *
 * - Interleaved fenced writers through the shared data port, with paused owners: the
 *   history checker finds no violation, and both workers admitted writes.
 * - /metrics is the sum over the workers; /v1/events holds both workers' events.
 * - SIGHUP reloads the policy in every worker (the policy file is a symlink whose target
 *   lives outside the watched directory, so the file watcher does not see the edit: only
 *   the signal can reload it).
 * - A killed worker is started again, and serves; the counters do not go down.
 * - SIGTERM drains: a slow write in flight completes, then the primary exits 0.
 *
 * Which worker answered is read from the access log (each line has `worker`). Requests
 * that must reach both workers go over fresh connections (the primary hands each new
 * connection to the next worker), repeated until both answered.
 */
import { request as httpRequest } from 'node:http';
import { mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSampleUpstream, type SampleUpstream } from '../../src/sample/index.js';
import {
  SHARED_REDIS,
  acquire,
  dropRedisPrefix,
  metricValue,
  policyYaml,
  randomNamespace,
  twoTokens,
  uid,
  waitFor,
  type RouteSpec,
} from '../helpers/e2e.js';
import { startFencegate, tempDir, type FencegateProcess, type LogLine } from '../helpers/procs.js';
import { expectHistoryOk, HistoryRecorder, runWorkload } from '../fault/harness/index.js';

const writes: RouteSpec = {
  name: 'order-writes',
  methods: ['PUT'],
  path: '/orders/:orderId',
  lock: 'order:{orderId}',
};
const reads: RouteSpec = { name: 'order-reads', methods: ['GET', 'HEAD'], path: '/orders/*' };
const extra: RouteSpec = { name: 'order-deletes', methods: ['DELETE'], path: '/orders/:orderId' };

interface Answer {
  status: number;
  text: string;
}

/** A request over a connection of its own (no keep-alive pool): the primary hands it to the next worker. */
function fresh(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const body = method === 'GET' || method === 'DELETE' ? null : JSON.stringify({ at: path });
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      new URL(path, base),
      {
        method,
        agent: false,
        headers: {
          connection: 'close',
          ...(body === null ? {} : { 'content-type': 'application/json' }),
          ...headers,
        },
      },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(body ?? undefined);
  });
}

describe('serve --workers 2 (redis store)', () => {
  let upstream: SampleUpstream;
  let dir: string;
  let namespace: string;
  let fg: FencegateProcess;
  const target = () => join(dir, 'real', 'orders.yaml');

  /** The data-listener access lines, optionally only those of `route`. */
  const access = (route?: string): LogLine[] =>
    fg.logs().filter((l) => l.listener === 'data' && l.msg === 'request' && (!route || l.route === route));
  const workersOf = (lines: LogLine[]) => new Set(lines.map((l) => l.worker));
  const workerPid = (slot: number): number | undefined =>
    fg
      .logs()
      .filter((l) => l.worker === slot)
      .map((l) => l.pid as number)
      .at(-1);

  /** Sends `make()` over fresh connections until access lines of `route` from both workers appear. */
  async function untilBothWorkers(route: string, make: () => Promise<Answer>, since = 0): Promise<Answer[]> {
    const answers: Answer[] = [];
    await waitFor(
      `both workers to answer on ${route}`,
      async () => {
        answers.push(await make());
        return workersOf(access(route).slice(since)).size === 2;
      },
      60_000,
    );
    return answers;
  }

  beforeAll(async () => {
    upstream = await startSampleUpstream({ port: 0 });
    dir = await tempDir('fg-e2e-workers-');
    namespace = randomNamespace('fgworkers');
    await mkdir(join(dir, 'policies'));
    await mkdir(join(dir, 'real'));
    await writeFile(target(), policyYaml(upstream.url, [writes, reads]));
    await symlink(target(), join(dir, 'policies', 'orders.yaml'));
    fg = await startFencegate([
      '--store',
      SHARED_REDIS,
      '--allow-volatile-redis',
      '--store-namespace',
      namespace,
      '--policies',
      join(dir, 'policies'),
      '--workers',
      '2',
      '--log-level',
      'info',
      '--session-ttl-ms',
      '3000',
    ]);
  }, 120_000);

  afterAll(async () => {
    await fg?.kill();
    await upstream?.close();
    await dropRedisPrefix(namespace);
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('starts two workers under one primary, every log line naming its process', () => {
    const logs = fg.logs();
    expect(logs.length).toBeGreaterThan(0);
    for (const l of logs) expect([0, 1, 2]).toContain(l.worker);
    expect(fg.output()).toMatch(/workers ready: 2 processes share the data listener/);
    const pids = new Set([0, 1, 2].map(workerPid));
    expect(pids.size).toBe(3);
    expect(workerPid(0)).toBe(fg.proc.pid);
  });

  it('is ready while its workers serve: /readyz and /v1/status count them, with their store breaker', async () => {
    const res = await fetch(`${fg.control}/readyz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ ok: true, workers: { ready: 2, configured: 2 } });
    const status = await (await fetch(`${fg.control}/v1/status`)).json();
    expect(status).toMatchObject({
      workers: { ready: 2, configured: 2 },
      store: { kind: 'redis', ok: true, breaker: 'closed' },
    });
  });

  it('keeps one fence across the workers: interleaved writers, paused owners, no violation', async () => {
    const history = new HistoryRecorder();
    const tag = uid('fence');
    const before = access('order-writes').length;
    const stats = await runWorkload(history, {
      workers: 6,
      orderIds: ['a', 'b', 'c'].map((o) => `${tag}-${o}`),
      ttlMs: 400,
      maxOps: 240,
      maxDurationMs: 90_000,
      pauseChance: 0.2,
      maxDelayMs: 60,
      writerPrefix: `${tag}-w`,
      endpoint: () => ({ control: fg.control, data: fg.data }),
    });
    expect(stats.acknowledged).toBeGreaterThan(20);
    await expectHistoryOk(upstream.url, history, { only: (w) => w.id.startsWith(tag) });
    // The writes were fenced by both workers, not by one of them.
    const admitted = access('order-writes')
      .slice(before)
      .filter((l) => l.fence === 'admitted');
    expect(workersOf(admitted)).toEqual(new Set([1, 2]));
  }, 180_000);

  it('sums the workers in /metrics: K admitted writes spread over both count K', async () => {
    const id = uid('o');
    const grant = await acquire(fg.control, `order:${id}`, 'metrics-owner', 60_000);
    const route = { route: 'order-writes' };
    const before = await metricValue(fg.control, 'fencegate_admitted_writes_total', route);
    const since = access('order-writes').length;
    const answers = await untilBothWorkers(
      'order-writes',
      () => fresh(fg.data, 'PUT', `/orders/${id}`, { 'fencing-token': grant.token }),
      since,
    );
    for (const a of answers) expect([200, 201], a.text).toContain(a.status);
    const perWorker = [1, 2].map(
      (w) =>
        access('order-writes')
          .slice(since)
          .filter((l) => l.worker === w).length,
    );
    expect(perWorker.every((n) => n > 0)).toBe(true);
    expect(await metricValue(fg.control, 'fencegate_admitted_writes_total', route)).toBe(
      before + answers.length,
    );
  }, 90_000);

  it('shows the events of both workers in /v1/events', async () => {
    const id = uid('o');
    const [low, high] = await twoTokens(fg.control, `order:${id}`);
    const ok = await fresh(fg.data, 'PUT', `/orders/${id}`, { 'fencing-token': high.token });
    expect([200, 201]).toContain(ok.status);
    const since = access('order-writes').length;
    const stale = await untilBothWorkers(
      'order-writes',
      () => fresh(fg.data, 'PUT', `/orders/${id}`, { 'fencing-token': low.token }),
      since,
    );
    for (const a of stale) expect(a.status, a.text).toBe(409);
    await waitFor(
      'the events of every refusal',
      async () => {
        const res = await fetch(`${fg.control}/v1/events?lock=${encodeURIComponent(`order:${id}`)}`);
        const body = (await res.json()) as { events: { reason: string; worker?: number }[] };
        return body.events.length === stale.length;
      },
      30_000,
    );
    const res = await fetch(`${fg.control}/v1/events?lock=${encodeURIComponent(`order:${id}`)}`);
    const { events } = (await res.json()) as { events: { reason: string; worker?: number; token: string }[] };
    expect(events.every((e) => e.reason === 'stale' && e.token === low.token)).toBe(true);
    expect(new Set(events.map((e) => e.worker))).toEqual(new Set([1, 2]));
  }, 90_000);

  it('reloads the policy in every worker on SIGHUP to the primary', async () => {
    const id = uid('o');
    const before = await fresh(fg.data, 'DELETE', `/orders/${id}`);
    expect(before.status, before.text).toBe(404);
    expect(before.text).toContain('no-route');
    // The symlink's target is outside the watched directory: no watcher sees this edit.
    await writeFile(target(), policyYaml(upstream.url, [writes, reads, extra]));
    const reloads = () => (fg.output().match(/SIGHUP: policies reloaded \(3 routes\)/g) ?? []).length;
    fg.proc.kill('SIGHUP');
    await waitFor('the primary to reload', async () => reloads() === 1, 30_000);
    const since = access('order-deletes').length;
    const answers = await untilBothWorkers(
      'order-deletes',
      () => fresh(fg.data, 'DELETE', `/orders/${uid('gone')}`),
      since,
    );
    // Forwarded to the upstream (which has no such order), not refused as no-route.
    for (const a of answers) expect(a.text).not.toContain('no-route');
  }, 90_000);

  it('starts a killed worker again; it serves, and the counters do not go down', async () => {
    const victim = workerPid(1) as number;
    expect(victim).toBeGreaterThan(0);
    const counted = await metricValue(fg.control, 'fencegate_requests_total', {
      route: 'order-writes',
      status_class: '2xx',
    });
    process.kill(victim, 'SIGKILL');
    await waitFor('worker 1 to start again', async () => /worker 1 started again/.test(fg.output()), 60_000);
    const fresh1 = workerPid(1) as number;
    expect(fresh1).not.toBe(victim);
    expect(fg.output()).toMatch(/worker 1 exited with signal SIGKILL; starting it again in \d+ ms/);
    expect(await metricValue(fg.control, 'fencegate_worker_restarts_total', {})).toBe(1);
    expect(
      await metricValue(fg.control, 'fencegate_requests_total', {
        route: 'order-writes',
        status_class: '2xx',
      }),
    ).toBeGreaterThanOrEqual(counted);
    const since = access('order-reads').length;
    await untilBothWorkers('order-reads', () => fresh(fg.data, 'GET', `/orders/${uid('r')}`), since);
    const pids = new Set(
      access('order-reads')
        .slice(since)
        .map((l) => l.pid),
    );
    expect(pids.has(fresh1)).toBe(true);
    expect(pids.has(victim)).toBe(false);
  }, 120_000);

  it('drains on SIGTERM: a slow write in flight completes, then the primary exits 0', async () => {
    const id = uid('o');
    const grant = await acquire(fg.control, `order:${id}`, 'drain-owner', 60_000);
    const since = access('order-writes').length;
    const slow = fresh(fg.data, 'PUT', `/orders/${id}?delayMs=2500`, { 'fencing-token': grant.token });
    // Admitted and at the upstream: the worker logs nothing until it answers, so ask the store.
    await waitFor(
      'the slow write to be admitted',
      async () => {
        const res = await fetch(`${fg.control}/v1/locks/${encodeURIComponent(`order:${id}`)}`);
        return ((await res.json()) as { highest?: string | null }).highest === grant.token;
      },
      30_000,
    );
    const code = fg.stop();
    const answer = await slow;
    expect(answer.status, answer.text).toBe(201);
    expect(await code).toBe(0);
    expect(
      access('order-writes')
        .slice(since)
        .map((l) => l.status),
    ).toEqual([201]);
    expect(fg.output()).toMatch(/SIGTERM: shutting down/);
  }, 90_000);
});
