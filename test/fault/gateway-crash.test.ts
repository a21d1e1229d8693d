/**
 * kill -9 a gateway mid-load. Two `fencegate serve` processes share one store (Redis,
 * Postgres, an embedded directory); the workload is split across both; one is SIGKILLed while writes are in
 * flight through it, restarted (new ports), and the workload goes on through it. Writes
 * that were in flight to the killed gateway get connection errors and are recorded as
 * 'error' (indeterminate: they may or may not have been applied).
 *
 * One write is made an orphan on purpose: it is held at the upstream while its gateway
 * is killed, so its in-flight entry is left behind in the store. A later owner of that
 * lock (higher token) is held at the drain barrier — 503 fence-unavailable while the
 * orphan still counts — and gets through once the orphan's entry reaches its deadline
 * (drain timeout + upstream timeout + 2 s, docs/gateway.md), never before the orphan was
 * applied.
 *
 * Every run ends with the history checker: acknowledged writes applied, no stale
 * owner's write applied after a newer one.
 */
import { randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { formatViolation } from '../checker/index.js';
import { freePort, type FencegateProcess } from '../helpers/procs.js';
import {
  checkRun,
  HistoryRecorder,
  opId,
  runWorkload,
  useFaultSite,
  type FaultStore,
  type GatedUpstream,
  type StoreKind,
  type WriteResult,
} from './harness/index.js';
import { sleep, waitUntil } from '../helpers/wait.js';

const KINDS: StoreKind[] = ['redis', 'postgres', 'embedded'];
const until = (what: string, cond: () => boolean, timeoutMs: number): Promise<void> =>
  waitUntil(what, cond, { timeoutMs, everyMs: 25 });

describe.each(KINDS)('gateway kill -9 mid-load (%s store)', (kind) => {
  const site = useFaultSite();
  let store: FaultStore | null = null;
  let upstream: GatedUpstream | null = null;
  const gateways: (FencegateProcess | null)[] = [];

  const start = () => site.serve();

  beforeAll(async () => {
    upstream = await site.startUpstream();
    store = await site.openStore(kind);
    await site.ordersPolicy({ timeoutMs: 2000, drainTimeoutMs: 3000 });
    gateways.push(await start());
    if (store.shared) gateways.push(await start());
  }, 90_000);

  it('keeps acknowledged writes and the order across the crash; the workload goes on', async () => {
    const up = upstream as GatedUpstream;
    const shared = (store as FaultStore).shared;
    const history = new HistoryRecorder();
    const tag = randomBytes(3).toString('hex');
    const victim = gateways.length - 1; // index of the gateway we kill
    const acksVia = new Map<string, number>(); // data URL -> acknowledged writes
    let over = false;
    const successorStatuses: (number | string)[] = [];

    const workload = runWorkload(history, {
      workers: 6,
      orderIds: [0, 1, 2, 3].map((i) => `crash${i}-${tag}`),
      ttlMs: 500,
      maxOps: 2000,
      maxDurationMs: 100_000,
      pauseChance: 0.1,
      maxDelayMs: 150,
      writerPrefix: `w-${tag}-`,
      endpoint: (w) => {
        const g = gateways[w % gateways.length] ?? gateways.find((x) => x !== null) ?? null;
        return g ? { control: g.control, data: g.data } : null;
      },
      onWrite: (_w, status, data) => {
        if (typeof status === 'number' && status >= 200 && status < 300)
          acksVia.set(data, (acksVia.get(data) ?? 0) + 1);
      },
      stop: () => over,
    });

    try {
      const before = gateways[victim] as FencegateProcess;
      await until('load through the victim', () => (acksVia.get(before.data) ?? 0) >= 15, 60_000);

      // The orphan: admitted by the victim, held at the upstream while the victim dies.
      const orphanId = `orphan-${tag}`;
      const orphanLock = `order:${orphanId}`;
      const owner1 = `orphan-owner-${tag}`;
      const l1 = await history.acquire(before.control, orphanLock, owner1, { ttlMs: 300, waitMs: 5000 });
      expect(l1).not.toBeNull();
      const orphanReq = opId(owner1);
      const orphan = history.write({
        data: before.data,
        path: `/orders/${orphanId}?hold=orphan-${tag}`,
        lock: orphanLock,
        token: l1?.fencingToken ?? null,
        writer: owner1,
        requestId: orphanReq,
      });
      await until('the orphan at the upstream', () => up.indexOf('received', orphanReq) >= 0, 30_000);

      await before.kill('SIGKILL');
      gateways[victim] = null;
      const orphanResult: WriteResult = await orphan;
      expect(orphanResult.status).toBe('error'); // the connection died with the gateway
      up.open(`orphan-${tag}`); // the upstream applies it anyway: the write was handed over
      await until('the orphan applied', () => up.indexOf('applied', orphanReq) >= 0, 30_000);

      if (!shared) gateways[victim] = await start(); // embedded: the only gateway comes back
      const survivor = gateways.find((g) => g !== null) as FencegateProcess;

      // A later owner: held while the orphan's entry counts, then through.
      const owner2 = `successor-${tag}`;
      const l2 = await history.acquire(survivor.control, orphanLock, owner2, {
        ttlMs: 30_000,
        waitMs: 10_000,
      });
      expect(l2).not.toBeNull();
      expect(BigInt(l2?.fencingToken as string)).toBeGreaterThan(BigInt(l1?.fencingToken as string));
      let successorReq = '';
      for (let attempt = 0; attempt < 15; attempt++) {
        successorReq = opId(owner2);
        const r = await history.write({
          data: survivor.data,
          path: `/orders/${orphanId}`,
          lock: orphanLock,
          token: l2?.fencingToken ?? null,
          writer: owner2,
          requestId: successorReq,
        });
        successorStatuses.push(r.status);
        if (r.status === 200) break;
        expect(r.status, JSON.stringify(r.body)).toBe(503);
        expect(r.problem).toBe('urn:fencegate:fence-unavailable');
        await sleep(200);
      }
      expect(successorStatuses.at(-1), `successor statuses ${successorStatuses.join(',')}`).toBe(200);
      await l2?.release();
      // The orphan (token of owner 1) was applied before the successor's write.
      expect(up.indexOf('applied', orphanReq)).toBeGreaterThanOrEqual(0);
      expect(up.indexOf('applied', orphanReq)).toBeLessThan(up.indexOf('received', successorReq));

      if (shared) gateways[victim] = await start(); // restart the killed one (new ports)
      const after = gateways[victim] as FencegateProcess;
      await until('load through the restarted gateway', () => (acksVia.get(after.data) ?? 0) >= 10, 60_000);
    } finally {
      over = true;
      await workload;
    }

    const { result } = await checkRun(up.url, history);
    const statusCounts = new Map<string, number>();
    for (const op of history.operations)
      statusCounts.set(String(op.status), (statusCounts.get(String(op.status)) ?? 0) + 1);
    console.info(
      `[gateway-crash ${kind}] successor: ${successorStatuses.join(',')}; ` +
        `operations by status: ${[...statusCounts].map(([k, v]) => `${k}=${v}`).join(' ')}`,
    );
    expect(result.ok, formatViolation(result)).toBe(true);
    if (result.ok) {
      expect(result.stats.acknowledged).toBeGreaterThan(25);
      // Writes in flight at the kill (at least the orphan) are indeterminate, not lost.
      expect(result.stats.indeterminate).toBeGreaterThanOrEqual(1);
    }
  }, 240_000);
});

/**
 * The same crash inside one `fencegate serve --workers 2` (Redis): the worker holding the
 * orphan is SIGKILLed (worker 1, and worker 2 too when the orphan went through it). The primary starts it again; the dead worker's session lapses in the
 * store as a crashed gateway's does, so the successor is held until then and never
 * overtakes the orphan; the workload goes on through the same port; the checker passes.
 */
describe('worker kill -9 mid-load (redis store, serve --workers 2)', () => {
  const site = useFaultSite();
  let upstream: GatedUpstream | null = null;
  let gw: FencegateProcess | null = null;

  beforeAll(async () => {
    upstream = await site.startUpstream();
    await site.openStore('redis');
    // The upstream timeout leaves room to kill the orphan's worker before it answers 504.
    await site.ordersPolicy({ timeoutMs: 10_000, drainTimeoutMs: 3000 });
    // A fixed data port: replacements of dead workers share it whatever happens.
    const listen = `127.0.0.1:${await freePort()}`;
    gw = await site.serve([
      '--workers',
      '2',
      '--listen',
      listen,
      '--log-level',
      'info',
      '--access-log',
      'off',
    ]);
  }, 90_000);

  const workerPid = (g: FencegateProcess, slot: number) =>
    g
      .logs()
      .filter((l) => l.worker === slot)
      .map((l) => l.pid as number)
      .at(-1) as number;

  it('keeps acknowledged writes and the order across a worker crash; the workload goes on', async () => {
    const [g, up] = [gw as FencegateProcess, upstream as GatedUpstream];
    const history = new HistoryRecorder();
    const tag = randomBytes(3).toString('hex');
    let acks = 0;
    let over = false;
    const workload = runWorkload(history, {
      workers: 6,
      orderIds: [0, 1, 2, 3].map((i) => `wcrash${i}-${tag}`),
      ttlMs: 500,
      maxOps: 2000,
      maxDurationMs: 100_000,
      pauseChance: 0.1,
      maxDelayMs: 150,
      writerPrefix: `w-${tag}-`,
      endpoint: () => ({ control: g.control, data: g.data }),
      onWrite: (_w, status) => {
        if (typeof status === 'number' && status >= 200 && status < 300) acks += 1;
      },
      stop: () => over,
    });
    try {
      await until('load through the workers', () => acks >= 15, 60_000);
      const orphanId = `orphan-${tag}`;
      const orphanLock = `order:${orphanId}`;
      const owner1 = `orphan-owner-${tag}`;
      const l1 = await history.acquire(g.control, orphanLock, owner1, { ttlMs: 300, waitMs: 5000 });
      expect(l1).not.toBeNull();
      const orphanReq = opId(owner1);
      let orphanSettled = false;
      const orphan = history
        .write({
          data: g.data,
          path: `/orders/${orphanId}?hold=orphan-${tag}`,
          lock: orphanLock,
          token: l1?.fencingToken ?? null,
          writer: owner1,
          requestId: orphanReq,
        })
        .finally(() => (orphanSettled = true));
      await until('the orphan at the upstream', () => up.indexOf('received', orphanReq) >= 0, 30_000);

      const first = workerPid(g, 1);
      process.kill(first, 'SIGKILL');
      await sleep(300); // long enough for the orphan's connection to fail if worker 1 had it
      if (!orphanSettled) process.kill(workerPid(g, 2), 'SIGKILL'); // the orphan was worker 2's
      await until('worker 1 started again', () => workerPid(g, 1) !== first, 60_000);
      const orphanResult: WriteResult = await orphan;
      expect(orphanResult.status).toBe('error'); // the connection died with its worker
      up.open(`orphan-${tag}`); // the upstream applies it anyway: the write was handed over
      await until('the orphan applied', () => up.indexOf('applied', orphanReq) >= 0, 30_000);

      const owner2 = `successor-${tag}`;
      const l2 = await history.acquire(g.control, orphanLock, owner2, { ttlMs: 30_000, waitMs: 10_000 });
      expect(l2).not.toBeNull();
      const statuses: (number | string)[] = [];
      let successorReq = '';
      for (let attempt = 0; attempt < 40; attempt++) {
        successorReq = opId(owner2);
        const r = await history.write({
          data: g.data,
          path: `/orders/${orphanId}`,
          lock: orphanLock,
          token: l2?.fencingToken ?? null,
          writer: owner2,
          requestId: successorReq,
        });
        statuses.push(r.status);
        if (r.status === 200) break;
        expect(r.status, JSON.stringify(r.body)).toBe(503);
        await sleep(200);
      }
      expect(statuses.at(-1), `successor statuses ${statuses.join(',')}`).toBe(200);
      await l2?.release();
      expect(up.indexOf('applied', orphanReq)).toBeLessThan(up.indexOf('received', successorReq));
      const before = acks;
      await until('load through the restarted workers', () => acks >= before + 10, 60_000);
      expect(g.output()).toMatch(/worker \d exited with signal SIGKILL; starting it again/);
    } finally {
      over = true;
      await workload;
    }
    const { result } = await checkRun(up.url, history);
    expect(result.ok, formatViolation(result)).toBe(true);
    if (result.ok) {
      expect(result.stats.acknowledged).toBeGreaterThan(25);
      expect(result.stats.indeterminate).toBeGreaterThanOrEqual(1);
    }
  }, 240_000);
});
