/**
 * Clock skew: the gateway's and a client's wall clocks jump forward and back
 * (libfaketime, offsets from a file we rewrite), the store (Redis, or Postgres for the
 * gateway's skew) keeps real time. The embedded store does not apply: it runs inside
 * the gateway's process, so its clock is the gateway's (docs/safety-faults.md).
 *
 * Shows that safety does not depend on those clocks: leases are judged by the store's
 * clock (Redis TIME inside the scripts), fence checks are token comparisons, so a
 * gateway an hour ahead or behind neither frees a live lease nor admits a stale token,
 * and a workload run while its clock jumps passes the history checker. Shows where
 * liveness does depend on them (the issuer's acquire wait, the drain barrier's timeout:
 * see docs/safety-faults.md), and that the client's local lease deadline does not (it
 * runs on the monotonic clock since 518ac33); a client that writes with an expired
 * token is refused by the fence whatever its clock says.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { startFencegate, startRedis, type FencegateProcess, type RedisProcess } from '../helpers/procs.js';
import { startCluster, type Cluster } from '../helpers/sql-cluster.js';
import { clockOffsetOf, fakeClock, type FakeClock } from './lib/faketime.js';
import {
  acquire,
  acquireEventually,
  applied,
  checkRun,
  formatViolation,
  grantOrderViolation,
  Recorder,
  release,
  sleep,
  startSite,
  startWorkload,
  until,
  write,
  type Site,
} from './lib/workload.js';

const HOUR = 3_600_000;

let server: FencegateProcess | null = null;
let site: Site | null = null;
let redis: RedisProcess | null = null;
let postgres: Cluster | null = null;
let clock: FakeClock | null = null;
let client: ChildProcess | null = null;
afterEach(async () => {
  client?.kill('SIGKILL');
  await server?.kill();
  await redis?.stop();
  await postgres?.destroy();
  await site?.close();
  await clock?.close();
  server = site = redis = postgres = clock = client = null;
});

async function setup(
  kind: 'redis' | 'postgres' = 'redis',
): Promise<{ gw: FencegateProcess; site: Site; clock: FakeClock }> {
  let url: string;
  if (kind === 'redis') {
    redis = await startRedis({ durable: true });
    url = redis.url;
  } else {
    postgres = await startCluster();
    url = postgres.url;
  }
  site = await startSite();
  clock = await fakeClock('+0');
  server = await startFencegate(['--store', url, '--policies', site.policy], clock.env);
  return { gw: server, site, clock };
}

/** Moves a process's wall clock and waits until its Date header shows it (within a minute). */
async function jump(c: FakeClock, url: string, offset: string, expectedMs: number): Promise<void> {
  await c.set(offset);
  await until(
    `the clock of ${url} at ${offset}`,
    async () => Math.abs((await clockOffsetOf(url)) - expectedMs) < 60_000,
  );
}

interface SkewClient {
  events: Record<string, unknown>[];
  send(line: string): void;
  next(event: string): Promise<Record<string, unknown>>;
}

/** test/fault/lib/skew-client.mjs under libfaketime. */
function startSkewClient(env: NodeJS.ProcessEnv, args: string[]): SkewClient {
  const script = fileURLToPath(new URL('./lib/skew-client.mjs', import.meta.url));
  const proc = spawn(process.execPath, [script, ...args], {
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  client = proc;
  const events: Record<string, unknown>[] = [];
  let stderr = '';
  proc.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  createInterface({ input: proc.stdout! }).on('line', (l) =>
    events.push(JSON.parse(l) as Record<string, unknown>),
  );
  let seen = 0;
  return {
    events,
    send: (line) => proc.stdin?.write(`${line}\n`),
    async next(event) {
      for (let i = 0; i < 600; i++) {
        const at = events.findIndex((e, j) => j >= seen && e.event === event);
        if (at >= 0) {
          seen = at + 1;
          return events[at] as Record<string, unknown>;
        }
        if (proc.exitCode !== null) break;
        await sleep(50);
      }
      throw new Error(`skew client: no "${event}" event; got ${JSON.stringify(events)}; stderr: ${stderr}`);
    },
  };
}

async function lockState(control: string, key: string) {
  const res = await fetch(`${control}/v1/locks/${encodeURIComponent(key)}`, {
    signal: AbortSignal.timeout(10_000),
  });
  return (await res.json()) as { held: boolean; token: string; waiters: number };
}

describe('clock skew (libfaketime on the gateway and a client; the store keeps real time)', () => {
  it.each(['redis', 'postgres'] as const)(
    'a gateway clock an hour ahead or behind neither frees a live lease nor admits a stale token (%s store)',
    async (kind) => {
      const { gw, site: s, clock: c } = await setup(kind);
      const rec = new Recorder();
      const a = await acquireEventually(gw.control, 'order:skew', 'A', rec, { ttlMs: 60_000 });
      expect((await write(gw.data, 'skew', a.token, 'A', rec)).status).toBe(201);

      for (const [offset, ms] of [
        ['+1h', HOUR],
        ['-1h', -HOUR],
      ] as const) {
        await jump(c, `${gw.control}/healthz`, offset, ms);
        // The lease is live by the store's clock: held, and nobody else gets it.
        expect((await lockState(gw.control, 'order:skew')).held).toBe(true);
        expect(await acquire(gw.control, 'order:skew', 'B', rec)).toBeNull();
        expect((await write(gw.data, 'skew', a.token, 'A', rec)).status).toBe(200);
      }

      // A releases; B takes over and writes; A's token is now stale whatever the clocks say.
      await release(gw.control, a);
      const b = await acquireEventually(gw.control, 'order:skew', 'B', rec, { ttlMs: 60_000 });
      expect(BigInt(b.token)).toBeGreaterThan(BigInt(a.token));
      expect((await write(gw.data, 'skew', b.token, 'B', rec)).status).toBe(200);
      for (const [offset, ms] of [
        ['+1h', HOUR],
        ['-1h', -HOUR],
        ['+0', 0],
      ] as const) {
        await jump(c, `${gw.control}/healthz`, offset, ms);
        const w = await write(gw.data, 'skew', a.token, 'A', rec);
        expect(w.status).toBe(409);
        expect(applied(s.upstream, w.requestId)).toBe(false);
      }
      await release(gw.control, b);

      // A workload while the gateway's clock keeps jumping.
      const keys = ['order:a', 'order:b', 'order:c'];
      const load = startWorkload({
        control: () => gw.control,
        data: () => gw.data,
        rec,
        keys,
        workers: 3,
        ttlMs: 1000,
      });
      for (const offset of ['+1h', '-1h', '+10m', '-3h', '+0', '+1d', '-1d', '+0']) {
        await c.set(offset);
        await sleep(400);
      }
      await until('the workload has written', async () => load.acknowledged >= 10, 600);
      await load.stop();
      expect(grantOrderViolation(rec.grants)).toBeNull();
      const result = checkRun(s.upstream, rec);
      expect(result.ok, result.ok ? '' : formatViolation(result)).toBe(true);
      expect(result.stats.acknowledged).toBeGreaterThan(10);
    },
    180_000,
  );

  it('a client whose clock jumped forward keeps its lease, and never believes in more than granted', async () => {
    const { gw } = await setup();
    const rec = new Recorder();
    const x = await acquireEventually(gw.control, 'order:early', 'X', rec, { ttlMs: 1500 });
    const cc = await fakeClock('+0');
    try {
      const cl = startSkewClient(cc.env, [gw.control, 'order:early', 'C', '30000', '20000']);
      await cl.next('acquiring');
      await until(
        'the client waits in the queue',
        async () => (await lockState(gw.control, 'order:early')).waiters >= 1,
      );
      await cc.set('+1h'); // while it waits for X's lease to lapse
      const got = await cl.next('acquired');
      expect(BigInt(got.token as string)).toBeGreaterThan(BigInt(x.token));
      // The local deadline runs on the monotonic clock: the jump neither adds to the lease
      // nor takes it away. (Before 518ac33 it read Date.now(): remainingMs was 0 here and
      // lock.signal fired at once, dropping a lease the store still held.)
      expect(got.remainingMs as number).toBeGreaterThan(0);
      expect(got.remainingMs as number).toBeLessThanOrEqual(30_000);
      expect(got.lost).toBe(false);
      expect((await lockState(gw.control, 'order:early')).held).toBe(true); // live by the store's clock
      cl.send('exit');
    } finally {
      await cc.close();
    }
  }, 120_000);

  it('a client whose clock jumped back still cannot write past a newer owner (the fence decides)', async () => {
    const { gw, site: s } = await setup();
    const rec = new Recorder();
    await acquireEventually(gw.control, 'order:late', 'X', rec, { ttlMs: 1500 });
    const cc = await fakeClock('+0');
    try {
      const cl = startSkewClient(cc.env, [gw.control, 'order:late', 'C', '2000', '20000']);
      await cl.next('acquiring');
      await until(
        'the client waits in the queue',
        async () => (await lockState(gw.control, 'order:late')).waiters >= 1,
      );
      await cc.set('-1h');
      const got = await cl.next('acquired');
      const token = got.token as string;
      // The store's lease (2 s) lapses; D takes over and writes.
      const d = await acquireEventually(gw.control, 'order:late', 'D', rec, { ttlMs: 60_000 });
      expect(BigInt(d.token)).toBeGreaterThan(BigInt(token));
      expect((await write(gw.data, 'late', d.token, 'D', rec)).status).toBe(201);
      // The client writes with its token, whatever it believes about its lease: refused, not forwarded.
      cl.send(`write ${gw.data}/orders/late stale-c-1`);
      const w = await cl.next('wrote');
      expect(w.status).toBe(409);
      // Its own deadline (monotonic, from when it asked) had passed before the store's did.
      expect(w.lost).toBe(true);
      expect(applied(s.upstream, 'stale-c-1')).toBe(false);
      cl.send('exit');
    } finally {
      await cc.close();
    }
  }, 120_000);

  // Regression test: before 518ac33 the client measured its deadline with Date.now(), and
  // after this 1 h step back it believed a 2 s lease had an hour left (remainingMs ≈
  // 3 600 000), against docs/client.md's "never later than the server's". Now on
  // performance.now().
  it("a client's local deadline is never later than the store's lease, even after its clock stepped back", async () => {
    const { gw } = await setup();
    const rec = new Recorder();
    await acquireEventually(gw.control, 'order:deadline', 'X', rec, { ttlMs: 1500 });
    const cc = await fakeClock('+0');
    try {
      const cl = startSkewClient(cc.env, [gw.control, 'order:deadline', 'C', '2000', '20000']);
      await cl.next('acquiring');
      await until(
        'the client waits in the queue',
        async () => (await lockState(gw.control, 'order:deadline')).waiters >= 1,
      );
      await cc.set('-1h');
      const got = await cl.next('acquired');
      cl.send('exit');
      expect(got.remainingMs as number).toBeLessThanOrEqual(2000);
    } finally {
      await cc.close();
    }
  }, 120_000);
});
