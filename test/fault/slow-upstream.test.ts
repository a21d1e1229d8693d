/**
 * Slow and hung upstreams, against docs/gateway.md ("The drain barrier", "Failures",
 * "What no proxy can promise"). The upstream is test/fault/harness/upstream.ts: it can
 * hold a write until the test opens a gate (and then applies it even if the gateway gave
 * up on it meanwhile, as a queue would), or hang (never answer, never apply), and it
 * logs what it saw in arrival order — the ground truth for "forwarded before/after".
 *
 * 1. Barrier, cleared: a higher token admitted while a lower-token write is in flight is
 *    not forwarded until the lower one has been answered; then it is (200).
 * 2. Barrier vs. upstream timeout: the lower write times out (504 upstream-timeout), its
 *    entry is removed, the higher one is forwarded. The upstream then applies the
 *    timed-out write late — after the higher token. No proxy can prevent that
 *    (docs/gateway.md, "What no proxy can promise"); the checker reports it as stale-owner, and the test
 *    asserts exactly that, so the limit stays visible instead of hidden.
 * 3. Barrier, drain timeout: the lower write stays in flight past the route's
 *    drainTimeoutMs: 503 fence-unavailable with Retry-After, never forwarded; a retry with
 *    the same token after the lower write finished is forwarded.
 * 4. Circuit breaker: repeated timeouts open the upstream's circuit (502
 *    upstream-unavailable with Retry-After, not tried — the upstream sees nothing);
 *    other upstreams are unaffected; when the upstream recovers the circuit closes.
 *
 * Each test's records go through the history checker. On Redis, Postgres and embedded.
 */
import { randomBytes } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { formatViolation } from '../checker/index.js';
import type { FencegateProcess } from '../helpers/procs.js';
import {
  checkRun,
  HistoryRecorder,
  opId,
  useFaultSite,
  type GatedUpstream,
  type StoreKind,
} from './harness/index.js';
import { sleep, waitUntil } from '../helpers/wait.js';

const KINDS: StoreKind[] = ['redis', 'postgres', 'embedded'];
const until = (what: string, cond: () => boolean, timeoutMs = 30_000): Promise<void> =>
  waitUntil(what, cond, { timeoutMs, everyMs: 20 });

/** fencegate_drain_wait_duration_seconds_count{outcome} from the control listener's /metrics. */
async function drainCount(control: string, outcome: string): Promise<number> {
  const text = await (await fetch(`${control}/metrics`, { signal: AbortSignal.timeout(20_000) })).text();
  const re = new RegExp(
    `^fencegate_drain_wait_duration_seconds_count\\{[^}]*outcome="${outcome}"[^}]*\\}\\s+(\\S+)`,
    'm',
  );
  return Number(re.exec(text)?.[1] ?? 0);
}

describe.each(KINDS)('slow and hung upstream (%s store)', (kind) => {
  const site = useFaultSite();
  let upstream: GatedUpstream | null = null;
  let gateway: FencegateProcess | null = null;

  beforeAll(async () => {
    upstream = await site.startUpstream();
    await site.openStore(kind);
    const url = upstream.url;
    await site.writePolicy(
      {
        patient: { url, timeoutMs: 8000 },
        impatient: { url, timeoutMs: 1000 },
        fragile: {
          url,
          timeoutMs: 500,
          breaker: {
            volumeThreshold: 3,
            errorThresholdPercentage: 50,
            resetTimeoutMs: 1500,
            rollingWindowMs: 30_000,
          },
        },
      },
      [
        {
          name: 'barrier',
          path: '/barrier/orders/:orderId',
          upstream: 'patient',
          lock: 'barrier:{orderId}',
          drainTimeoutMs: 15_000,
        },
        {
          name: 'late',
          path: '/late/orders/:orderId',
          upstream: 'impatient',
          lock: 'late:{orderId}',
          drainTimeoutMs: 15_000,
        },
        {
          name: 'drain503',
          path: '/drain503/orders/:orderId',
          upstream: 'patient',
          lock: 'drain503:{orderId}',
          drainTimeoutMs: 600,
        },
        { name: 'breaker', path: '/breaker/orders/:orderId', upstream: 'fragile', lock: 'breaker:{orderId}' },
      ],
    );
    gateway = await site.serve();
    // The tests take 300 ms leases: the first request of a fresh process and client (code
    // loaded and compiled on first use) must not be one of them on a loaded machine.
    const warm = await fetch(`${gateway.control}/v1/locks/warm-up/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ owner: 'warm-up', ttlMs: 1000 }),
    });
    expect(warm.status).toBe(200);
  }, 60_000);

  /**
   * Owner A (short lease) sends a write held at the upstream; owner B then gets the lock
   * (a higher token) once A's lease expires. Returns both and A's pending write.
   */
  async function lowerInFlight(route: string, history: HistoryRecorder) {
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const tag = randomBytes(3).toString('hex');
    const id = `o-${tag}`;
    const lock = `${route}:${id}`;
    const gate = `${route}-${tag}`;
    const a = `a-${tag}`;
    const b = `b-${tag}`;
    const la = await history.acquire(gw.control, lock, a, { ttlMs: 300 });
    expect(la).not.toBeNull();
    const reqA = opId(a);
    const writeA = history.write({
      data: gw.data,
      path: `/${route}/orders/${id}?hold=${gate}`,
      lock,
      token: la?.fencingToken ?? null,
      writer: a,
      requestId: reqA,
    });
    await until('A at the upstream', () => up.indexOf('received', reqA) >= 0);
    const lb = await history.acquire(gw.control, lock, b, { ttlMs: 30_000, waitMs: 10_000 });
    expect(lb).not.toBeNull();
    expect(BigInt(lb?.fencingToken as string)).toBeGreaterThan(BigInt(la?.fencingToken as string));
    const writeB = (requestId: string) =>
      history.write({
        data: gw.data,
        path: `/${route}/orders/${id}`,
        lock,
        token: lb?.fencingToken ?? null,
        writer: b,
        requestId,
      });
    return {
      tag,
      id,
      lock,
      gate,
      a,
      b,
      la,
      lb,
      reqA,
      writeA,
      writeB,
      only: (w: { lock: string | null }) => w.lock === lock,
    };
  }

  it('drain barrier: the higher token waits for the lower in-flight write, then is forwarded', async () => {
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const history = new HistoryRecorder();
    const clearedBefore = await drainCount(gw.control, 'cleared');
    const s = await lowerInFlight('barrier', history);
    const reqB = opId(s.b);
    const writeB = s.writeB(reqB);
    await sleep(700); // B reaches the gateway and waits at the barrier
    expect(up.indexOf('received', reqB), 'B forwarded while A was in flight').toBe(-1);
    up.open(s.gate);
    expect((await s.writeA).status).toBe(201);
    expect((await writeB).status).toBe(200);
    expect(up.indexOf('applied', s.reqA)).toBeLessThan(up.indexOf('received', reqB));
    expect(await drainCount(gw.control, 'cleared')).toBeGreaterThan(clearedBefore);
    await s.lb?.release();
    const { result } = await checkRun(up.url, history, { only: s.only });
    expect(result.ok, formatViolation(result)).toBe(true);
  }, 90_000);

  it('upstream timeout: 504, the barrier clears, and a late apply is visible to the checker', async () => {
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const history = new HistoryRecorder();
    const s = await lowerInFlight('late', history);
    const reqB = opId(s.b);
    const writeB = s.writeB(reqB);
    const a = await s.writeA;
    expect(a.status).toBe(504);
    expect(a.problem).toBe('urn:fencegate:upstream-timeout');
    expect((await writeB).status).toBe(201); // the first write applied to this order
    // B was forwarded only after the gateway gave up on A (it closed A's upstream request).
    expect(up.indexOf('client-closed', s.reqA)).toBeGreaterThanOrEqual(0);
    expect(up.indexOf('client-closed', s.reqA)).toBeLessThan(up.indexOf('received', reqB));
    expect(up.indexOf('applied', s.reqA), 'A not applied before B').toBe(-1);

    // The gateway keeps refusing A's token: the fence is at B's.
    const again = await history.write({
      data: gw.data,
      path: `/late/orders/${s.id}`,
      lock: s.lock,
      token: s.la?.fencingToken ?? null,
      writer: s.a,
      requestId: opId(s.a),
    });
    expect(again.status).toBe(409);
    expect(again.problem).toBe('urn:fencegate:stale-token');

    // The upstream had accepted A and now applies it, after B: what no proxy can promise.
    up.open(s.gate);
    await until('the late apply', () => up.indexOf('applied', s.reqA) >= 0);
    expect(up.indexOf('applied', s.reqA)).toBeGreaterThan(up.indexOf('applied', reqB));
    await s.lb?.release();
    const { result } = await checkRun(up.url, history, { only: s.only });
    // Documented, not hidden: the checker sees A's timed-out write applied after B's.
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.violation.kind, formatViolation(result)).toBe('stale-owner');
      expect(result.violation.lock).toBe(s.lock);
    }
  }, 90_000);

  it('client gives up while its write is at the upstream: the barrier holds until the upstream settles', async () => {
    // docs/gateway.md: "If the client disconnects while the request is at the upstream, the
    // entry stays until the upstream request settles, because the upstream may still apply it."
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const history = new HistoryRecorder();
    const tag = randomBytes(3).toString('hex');
    const id = `o-${tag}`;
    const lock = `barrier:${id}`;
    const gate = `gone-${tag}`;
    const a = `a-${tag}`;
    const b = `b-${tag}`;
    const la = await history.acquire(gw.control, lock, a, { ttlMs: 300 });
    const reqA = opId(a);
    const writeA = history.write({
      data: gw.data,
      path: `/barrier/orders/${id}?hold=${gate}`,
      lock,
      token: la?.fencingToken ?? null,
      writer: a,
      requestId: reqA,
      timeoutMs: 1500, // the client gives up while the upstream still holds the write
    });
    await until('A at the upstream', () => up.indexOf('received', reqA) >= 0);
    expect((await writeA).status).toBe('timeout');
    const lb = await history.acquire(gw.control, lock, b, { ttlMs: 30_000, waitMs: 10_000 });
    expect(BigInt(lb?.fencingToken as string)).toBeGreaterThan(BigInt(la?.fencingToken as string));
    const reqB = opId(b);
    const writeB = history.write({
      data: gw.data,
      path: `/barrier/orders/${id}`,
      lock,
      token: lb?.fencingToken ?? null,
      writer: b,
      requestId: reqB,
    });
    await sleep(700); // B reaches the gateway
    const forwardedEarly = up.indexOf('received', reqB) >= 0;
    up.open(gate); // the upstream applies A now, as it may
    await until('A applied', () => up.indexOf('applied', reqA) >= 0);
    const b1 = await writeB;
    await lb?.release();
    const { result } = await checkRun(up.url, history, { only: (w) => w.lock === lock });
    expect(
      { forwardedEarly, bStatus: b1.status, upstreamSawAClose: up.indexOf('client-closed', reqA) >= 0 },
      formatViolation(result),
    ).toEqual({ forwardedEarly: false, bStatus: 200, upstreamSawAClose: false });
    expect(result.ok, formatViolation(result)).toBe(true);
  }, 90_000);

  it('drain timeout: 503 fence-unavailable, not forwarded; a retry after the lower write finished passes', async () => {
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const history = new HistoryRecorder();
    const timeoutsBefore = await drainCount(gw.control, 'timeout');
    const s = await lowerInFlight('drain503', history);
    const reqB = opId(s.b);
    const b = await s.writeB(reqB);
    expect(b.status, JSON.stringify(b.body)).toBe(503);
    expect(b.problem).toBe('urn:fencegate:fence-unavailable');
    expect(b.headers?.get('retry-after')).toBe('1');
    expect(await drainCount(gw.control, 'timeout')).toBeGreaterThan(timeoutsBefore);
    up.open(s.gate);
    expect((await s.writeA).status).toBe(201);
    const reqB2 = opId(s.b);
    expect((await s.writeB(reqB2)).status).toBe(200);
    expect(up.indexOf('received', reqB), 'the refused write never reached the upstream').toBe(-1);
    expect(up.indexOf('applied', s.reqA)).toBeLessThan(up.indexOf('received', reqB2));
    await s.lb?.release();
    const { result } = await checkRun(up.url, history, { only: s.only });
    expect(result.ok, formatViolation(result)).toBe(true);
  }, 90_000);

  it('circuit breaker: opens after repeated timeouts (502, upstream not tried), closes on recovery', async () => {
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const history = new HistoryRecorder();
    const tag = randomBytes(3).toString('hex');
    const id = `o-${tag}`;
    const lock = `breaker:${id}`;
    const owner = `c-${tag}`;
    const l = await history.acquire(gw.control, lock, owner, { ttlMs: 120_000 });
    expect(l).not.toBeNull();
    const write = () =>
      history.write({
        data: gw.data,
        path: `/breaker/orders/${id}`,
        lock,
        token: l?.fencingToken ?? null,
        writer: owner,
        requestId: opId(owner),
      });

    up.setMode('breaker', 'hang');
    const statuses: (number | string)[] = [];
    let open: Awaited<ReturnType<typeof write>> | null = null;
    for (let i = 0; i < 12 && open === null; i++) {
      const seen = up.received('breaker');
      const r = await write();
      statuses.push(r.status);
      if (r.status === 502) {
        open = r;
        expect(up.received('breaker'), 'an open circuit does not try the upstream').toBe(seen);
      } else {
        expect(r.status, `statuses ${statuses.join(',')}`).toBe(504);
      }
    }
    expect(open, `statuses ${statuses.join(',')}`).not.toBeNull();
    expect(open?.problem).toBe('urn:fencegate:upstream-unavailable');
    expect(Number(open?.headers?.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(statuses.filter((s) => s === 504).length).toBeGreaterThanOrEqual(3); // volumeThreshold

    // A write refused by the open circuit (or, if it already half-opened, timed out) leaves
    // no in-flight entry behind: checked below, after recovery, with a higher token.
    const lock2 = `breaker:q-${tag}`;
    const x = `x-${tag}`;
    const lx = await history.acquire(gw.control, lock2, x, { ttlMs: 300 });
    const rx = await history.write({
      data: gw.data,
      path: `/breaker/orders/q-${tag}`,
      lock: lock2,
      token: lx?.fencingToken ?? null,
      writer: x,
      requestId: opId(x),
    });
    expect(rx.status).toBeOneOf([502, 504]);

    // The circuit is per upstream: the same service through another upstream entry still works.
    const other = `barrier:p-${tag}`;
    const lo = await history.acquire(gw.control, other, owner, { ttlMs: 30_000 });
    const viaPatient = await history.write({
      data: gw.data,
      path: `/barrier/orders/p-${tag}`,
      lock: other,
      token: lo?.fencingToken ?? null,
      writer: owner,
      requestId: opId(owner),
    });
    expect(viaPatient.status).toBe(201);
    await lo?.release();

    // Recovery: after resetTimeoutMs one trial goes through; success closes the circuit.
    up.setMode('breaker', 'ok');
    const recovery: (number | string)[] = [];
    for (let i = 0; i < 60; i++) {
      const seen = up.received('breaker');
      const r = await write();
      recovery.push(r.status);
      if (typeof r.status === 'number' && r.status < 300) break;
      expect(r.status, `recovery ${recovery.join(',')}`).toBe(502);
      expect(up.received('breaker')).toBe(seen);
      await sleep(200);
    }
    expect(recovery.at(-1), `recovery ${recovery.join(',')}`).toBeOneOf([200, 201]);
    for (let i = 0; i < 3; i++) expect((await write()).status).toBe(200); // closed again
    await l?.release();

    // A later owner of lock2 is not held back by the failed write: its entry was removed.
    const drainTimeoutsBefore = await drainCount(gw.control, 'timeout');
    const y = `y-${tag}`;
    const ly = await history.acquire(gw.control, lock2, y, { ttlMs: 30_000, waitMs: 10_000 });
    expect(BigInt(ly?.fencingToken as string)).toBeGreaterThan(BigInt(lx?.fencingToken as string));
    const ry = await history.write({
      data: gw.data,
      path: `/breaker/orders/q-${tag}`,
      lock: lock2,
      token: ly?.fencingToken ?? null,
      writer: y,
      requestId: opId(y),
    });
    expect(ry.status, JSON.stringify(ry.body)).toBe(201);
    expect(await drainCount(gw.control, 'timeout')).toBe(drainTimeoutsBefore);
    await ly?.release();

    const { result } = await checkRun(up.url, history, {
      only: (w) => w.lock === lock || w.lock === lock2 || w.lock === other,
    });
    expect(result.ok, formatViolation(result)).toBe(true);
  }, 120_000);
});
