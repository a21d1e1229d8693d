/**
 * The drain barrier holds while a write is really in flight (docs/adr/0005-gateway-sessions.md),
 * in the four ways a review broke it when in-flight entries lapsed at a store-clock deadline
 * (entry life = drainTimeoutMs + timeoutMs + 2 s, here 1.5 + 3 + 2 = 6.5 s):
 *
 * 1. A slow upload outlives that life: T1's body trickles in through gateway 1 for ~8 s.
 * 2. A full upstream pool: 256 unfenced writes, each answered after 2.5 s, keep gateway 1's
 *    128 connections busy; T1 waits ~5 s in undici's queue, then takes 2 s at the upstream.
 * 3. A paused gateway: T1 waits at gateway 1's barrier behind T0; gateway 1 is SIGSTOPped
 *    past its session TTL; on SIGCONT it must not forward T1. (On the embedded store it is
 *    stopped outside the directory's write lock, lib/embedded-pause.ts.)
 * 4. A store clock step forward (+1 h) while T1 is in flight: Postgres under libfaketime
 *    with two gateways, and the embedded store (the gateway's own host clock). Redis cannot
 *    be staged here (libfaketime recurses in its allocator's clock_gettime at start); its
 *    scripts read no clock for in-flight entries at all (fence_batch.lua, lower_inflight.lua).
 *
 * In each, T2 (a later owner, through gateway 2) retries on 503 until it is forwarded, and
 * must never reach the upstream before T1 was applied (or, in 3, while gateway 1 could
 * still send T1). Every run ends with the history checker, and T2 must succeed: a barrier
 * that refuses everything does not pass.
 */
import { request as httpRequest } from 'node:http';
import { rm } from 'node:fs/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/procs.js';
import { startCluster } from '../helpers/sql-cluster.js';
import { sleep } from '../helpers/wait.js';
import {
  expectRunClean,
  newRun,
  opId,
  SESSION_TTL,
  useFaultSite,
  writeUntilForwarded,
  type FaultSite,
  type GatedUpstream,
  type Run,
  type SiteGateway,
  type WriteResult,
} from './harness/index.js';
import { fakeClock, type FakeClock } from './lib/faketime.js';
import { until } from './lib/workload.js';

/** How long T2's owner retries on 503 before it gives up. */
const T2_RETRY_MS = 40_000;

/** The docs route (upstream bound 3 s) and an unfenced filler route, to the site's upstream. */
const docsAndFiller = (site: FaultSite) =>
  site.docsPolicy(3000, [{ name: 'filler', path: '/filler/orders/:id', upstream: 'app' }]);

/** The highest token admitted for `lock`, as the control API reports it (null: none yet). */
async function highest(control: string, lock: string): Promise<string | null> {
  const res = await fetch(`${control}/v1/locks/${encodeURIComponent(lock)}`);
  if (res.status !== 200) return null;
  return ((await res.json()) as { highest: string | null }).highest;
}

/**
 * A PUT whose body of `size` bytes trickles in one byte every `everyMs`; recorded like any
 * write. Chunked, with no Content-Length: it streams through to the upstream (a small body
 * of known length would be read whole before forwarding, docs/gateway.md).
 */
function slowUpload(
  run: Run,
  data: string,
  token: string,
  writer: string,
  requestId: string,
  size: number,
  everyMs: number,
): Promise<WriteResult> {
  const url = new URL(`${data}/docs/orders/${run.id}`);
  return new Promise<WriteResult>((resolve) => {
    const finish = (result: WriteResult) => {
      run.history.recordOperation({
        lock: run.lock,
        token,
        writer,
        requestId,
        status: result.status,
        acknowledged: typeof result.status === 'number' && result.status >= 200 && result.status < 300,
      });
      resolve(result);
    };
    const req = httpRequest(url, {
      method: 'PUT',
      headers: {
        'content-type': 'text/plain',
        'fencing-token': token,
        'x-request-id': requestId,
        'x-client-id': writer,
      },
    });
    let sent = 0;
    const timer = setInterval(() => {
      req.write('x');
      if (++sent === size) {
        clearInterval(timer);
        req.end();
      }
    }, everyMs);
    req.on('response', (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => finish({ status: res.statusCode ?? 0, problem: null, body: text, headers: null }));
    });
    req.on('error', (err) => {
      clearInterval(timer);
      finish({ status: 'error', problem: null, body: String(err), headers: null });
    });
  });
}

describe.each(['redis', 'postgres', 'embedded'] as const)(
  'the drain barrier holds while a write is in flight (%s, two gateways)',
  (kind) => {
    const site: FaultSite = useFaultSite({ serveArgs: SESSION_TTL });
    let gw1: SiteGateway | null = null;
    let gw2: SiteGateway | null = null;

    beforeAll(async () => {
      await site.startUpstream();
      await site.openStore(kind);
      await docsAndFiller(site);
      gw1 = await site.serve();
      gw2 = await site.serve();
    }, 120_000);

    /** Owner A takes the lock for 300 ms; returns its token and, after expiry, B's. */
    async function owners(run: Run, control: string, takeOverAt = control) {
      const la = await run.history.acquire(control, run.lock, `a-${run.tag}`, { ttlMs: 300, waitMs: 10_000 });
      expect(la).not.toBeNull();
      return {
        a: la?.fencingToken as string,
        takeOver: async () => {
          const lb = await run.history.acquire(takeOverAt, run.lock, `b-${run.tag}`, {
            ttlMs: 60_000,
            waitMs: 10_000,
          });
          expect(lb).not.toBeNull();
          return lb?.fencingToken as string;
        },
      };
    }

    it('a slow upload keeps its place: T2 waits until T1, still streaming past the old entry life, is applied', async () => {
      const [g1, g2, up] = [gw1 as SiteGateway, gw2 as SiteGateway, site.upstream as GatedUpstream];
      const run = newRun();
      const o = await owners(run, g1.control);
      const req1 = opId(`a-${run.tag}`);
      const t1 = slowUpload(run, g1.data, o.a, `a-${run.tag}`, req1, 16, 500); // ~8 s
      await until('T1 headers at the upstream', async () => up.indexOf('received', req1) >= 0);
      const b = await o.takeOver();
      const t2 = await writeUntilForwarded(run, g2.data, b, `b-${run.tag}`, T2_RETRY_MS);
      expect((await t1).status).toBe(201);
      expect(t2.result.status).toBe(200);
      expect(t2.attempts).toBeGreaterThan(1); // it was held back, then let through
      expect(up.indexOf('applied', req1)).toBeLessThan(up.indexOf('received', t2.requestId));
      await expectRunClean(up.url, run);
    }, 90_000);

    it('a write queued behind a full upstream pool keeps its place: T2 is not forwarded before T1', async () => {
      const [g1, g2, up] = [gw1 as SiteGateway, gw2 as SiteGateway, site.upstream as GatedUpstream];
      const run = newRun();
      const base = up.received('filler');
      const fillers = Array.from({ length: 256 }, (_, i) =>
        fetch(`${g1.data}/filler/orders/f${i}-${run.tag}?delayMs=2500`, {
          method: 'PUT',
          body: '{}',
          signal: AbortSignal.timeout(60_000),
        }).then(
          (r) => r.status,
          () => 0,
        ),
      );
      await until(
        "gateway 1's 128 upstream connections busy",
        async () => up.received('filler') - base >= 128,
      );
      const o = await owners(run, g1.control);
      const req1 = opId(`a-${run.tag}`);
      const t1 = run.history.write({
        data: g1.data,
        path: `/docs/orders/${run.id}?delayMs=2000`,
        lock: run.lock,
        token: o.a,
        writer: `a-${run.tag}`,
        requestId: req1,
      });
      // T1 is admitted (it waits in undici's queue after that) before the lock changes hands;
      // with gateway 1 busy with the fillers, admission can take longer than a's short lease.
      await until('T1 admitted at gateway 1', async () => (await highest(g1.control, run.lock)) === o.a);
      const b = await o.takeOver();
      const t2 = writeUntilForwarded(run, g2.data, b, `b-${run.tag}`, T2_RETRY_MS);
      await sleep(1500);
      expect(up.indexOf('received', req1), 'T1 still queued behind the fillers').toBe(-1);
      expect((await t1).status).toBe(201);
      const second = await t2;
      expect(second.result.status).toBe(200);
      expect(up.indexOf('applied', req1)).toBeLessThan(up.indexOf('received', second.requestId));
      expect(await Promise.all(fillers)).not.toContain(0);
      await expectRunClean(up.url, run);
    }, 120_000);

    it('a paused gateway forwards nothing after its session could be ended: T1 is refused on SIGCONT, T2 goes', async () => {
      const [g1, g2, up] = [gw1 as SiteGateway, gw2 as SiteGateway, site.upstream as GatedUpstream];
      const run = newRun();
      const gate0 = `t0-${run.tag}`;
      // T0: the first owner's write, held at the upstream.
      const l0 = await run.history.acquire(g1.control, run.lock, `z-${run.tag}`, { ttlMs: 300 });
      const req0 = opId(`z-${run.tag}`);
      const t0 = run.history.write({
        data: g1.data,
        path: `/docs/orders/${run.id}?hold=${gate0}`,
        lock: run.lock,
        token: l0?.fencingToken as string,
        writer: `z-${run.tag}`,
        requestId: req0,
      });
      await until('T0 at the upstream', async () => up.indexOf('received', req0) >= 0);
      // T1: the next owner, through the same gateway: admitted, waits at the barrier behind T0.
      const o = await owners(run, g1.control, g2.control);
      const req1 = opId(`a-${run.tag}`);
      const t1 = run.history.write({
        data: g1.data,
        path: `/docs/orders/${run.id}`,
        lock: run.lock,
        token: o.a,
        writer: `a-${run.tag}`,
        requestId: req1,
        timeoutMs: 60_000,
      });
      await sleep(300);
      // On the embedded store, not while gateway 1 holds the directory's write lock: that
      // would stop gateway 2's writes too, until SIGCONT (docs/stores-embedded.md).
      await g1.pause();
      let b: string;
      try {
        up.open(gate0); // T0 is applied; gateway 1 cannot see the answer
        await until('T0 applied', async () => up.indexOf('applied', req0) >= 0);
        b = await o.takeOver();
        const t2 = await writeUntilForwarded(run, g2.data, b, `b-${run.tag}`, T2_RETRY_MS);
        expect(t2.result.status).toBe(200);
        g1.resume();
        const first = await t1;
        expect(first.status).toBe(503); // its session lapsed while paused: never forwarded
        expect(up.indexOf('received', req1)).toBe(-1);
        await t0;
        await sleep(500);
        expect(up.indexOf('received', req1)).toBe(-1);
        expect(up.indexOf('applied', req0)).toBeLessThan(up.indexOf('received', t2.requestId));
      } finally {
        g1.resume();
      }
      // Gateway 1 recovers with a new session and forwards the current owner's writes again.
      const after = await writeUntilForwarded(run, g1.data, b, `b-${run.tag}`, T2_RETRY_MS);
      expect(after.result.status).toBe(200);
      await expectRunClean(up.url, run);
    }, 120_000);
  },
);

/**
 * 1 again, across the workers of one `fencegate serve --workers 2` (docs/adr/0008-workers.md):
 * T1's slow upload and T2 arrive on different connections of the shared data port, which
 * the primary hands to the workers in turn; each worker is a gateway with its own session,
 * so T2 is held by the barrier in the store exactly as by another gateway process. The
 * access log says which worker fenced each; if both landed on one worker, the scenario
 * is run again (a barrier within one worker is tested above).
 */
describe('the drain barrier holds across workers (redis, serve --workers 2)', () => {
  const site: FaultSite = useFaultSite({ serveArgs: SESSION_TTL });
  let gw: SiteGateway | null = null;

  beforeAll(async () => {
    await site.startUpstream();
    await site.openStore('redis');
    await docsAndFiller(site);
    gw = await site.serve(['--workers', '2', '--log-level', 'info']);
  }, 120_000);

  /** The worker whose access line fenced `token` on `lock` (admitted or refused), or undefined. */
  const fencedBy = (g: SiteGateway, lock: string, token: string) =>
    g.logs().find((l) => l.msg === 'request' && l.lock === lock && l.token === token)?.worker;

  it('a slow upload through one worker keeps its place: T2 through the other waits until T1 is applied', async () => {
    const [g, up] = [gw as SiteGateway, site.upstream as GatedUpstream];
    for (let attempt = 1; ; attempt++) {
      const run = newRun();
      const la = await run.history.acquire(g.control, run.lock, `a-${run.tag}`, {
        ttlMs: 300,
        waitMs: 10_000,
      });
      expect(la).not.toBeNull();
      const req1 = opId(`a-${run.tag}`);
      const t1 = slowUpload(run, g.data, la?.fencingToken as string, `a-${run.tag}`, req1, 16, 500); // ~8 s
      await until('T1 headers at the upstream', async () => up.indexOf('received', req1) >= 0);
      const lb = await run.history.acquire(g.control, run.lock, `b-${run.tag}`, {
        ttlMs: 60_000,
        waitMs: 10_000,
      });
      expect(lb).not.toBeNull();
      const b = lb?.fencingToken as string;
      const t2 = await writeUntilForwarded(run, g.data, b, `b-${run.tag}`, T2_RETRY_MS);
      expect((await t1).status).toBe(201);
      expect(t2.result.status).toBe(200);
      expect(t2.attempts).toBeGreaterThan(1); // it was held back, then let through
      expect(up.indexOf('applied', req1)).toBeLessThan(up.indexOf('received', t2.requestId));
      await expectRunClean(up.url, run);
      let w1: unknown;
      let w2: unknown;
      await until('both access lines', async () => {
        w1 = fencedBy(g, run.lock, la?.fencingToken as string);
        w2 = fencedBy(g, run.lock, b);
        return w1 !== undefined && w2 !== undefined;
      });
      if (w1 !== w2) return;
      if (attempt === 3) throw new Error('T1 and T2 were fenced by the same worker three times in a row');
    }
  }, 180_000);
});

/**
 * 4. The store's clock steps forward an hour while T1 is at the upstream. Nothing about the
 * barrier reads that clock any more; the gateways report the jump (metric, log).
 */
describe.each(['postgres', 'embedded'] as const)(
  'a store clock step forward does not release the barrier (%s)',
  (kind) => {
    const site: FaultSite = useFaultSite({ serveArgs: SESSION_TTL });
    let clock: FakeClock | null = null;
    let gateways: SiteGateway[] = [];

    beforeAll(async () => {
      const fake = await fakeClock('+0');
      clock = fake;
      site.defer(() => fake.close());
      await site.startUpstream();
      await docsAndFiller(site);
      if (kind === 'postgres') {
        const cluster = await startCluster(fake.env);
        site.defer(() => cluster.destroy());
        const args = ['--store', cluster.url];
        gateways = [await site.serve(args), await site.serve(args)];
      } else {
        // The embedded store's clock is the host clock of the processes that open it: one
        // gateway under libfaketime (a second one would disagree with it on lease times).
        const dir = await tempDir('fg-step-');
        site.defer(() => rm(dir, { recursive: true, force: true }));
        gateways = [await site.serve(['--store', dir], fake.env)];
      }
    }, 180_000);

    it('T2 waits for T1 although every store-clock deadline has passed; T2 then succeeds', async () => {
      const up = site.upstream as GatedUpstream;
      const fake = clock as FakeClock;
      const g1 = gateways[0] as SiteGateway;
      const g2 = gateways[1] ?? g1;
      const run = newRun();
      const la = await run.history.acquire(g1.control, run.lock, `a-${run.tag}`, { ttlMs: 300 });
      const req1 = opId(`a-${run.tag}`);
      const t1 = slowUpload(run, g1.data, la?.fencingToken as string, `a-${run.tag}`, req1, 12, 500); // ~6 s
      await until('T1 at the upstream', async () => up.indexOf('received', req1) >= 0);
      await sleep(400); // A's lease is over
      await fake.set('+1h'); // every store-clock deadline computed so far has now passed
      const lb = await run.history.acquire(g2.control, run.lock, `b-${run.tag}`, {
        ttlMs: 60_000,
        waitMs: 10_000,
      });
      expect(lb).not.toBeNull();
      const t2 = await writeUntilForwarded(
        run,
        g2.data,
        lb?.fencingToken as string,
        `b-${run.tag}`,
        T2_RETRY_MS,
      );
      expect((await t1).status).toBe(201);
      expect(t2.result.status).toBe(200);
      expect(t2.attempts).toBeGreaterThan(1);
      expect(up.indexOf('applied', req1)).toBeLessThan(up.indexOf('received', t2.requestId));
      await fake.set('+0');
      await expectRunClean(up.url, run);
    }, 120_000);
  },
);
