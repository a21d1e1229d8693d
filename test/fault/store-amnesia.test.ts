/**
 * Store amnesia: a Redis without persistence is restarted empty under a running
 * fencegate while clients acquire and write. Every token minted afterwards is above
 * every token minted before (the clock floor of ADR 0002), and old tokens, stale or
 * forged, are refused at the gateway and never reach the upstream. Ends with the
 * history checker. See docs/safety-faults.md.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startFencegate, startRedis, type FencegateProcess, type RedisProcess } from '../helpers/procs.js';
import {
  acquireEventually,
  applied,
  checkRun,
  formatViolation,
  grantOrderViolation,
  LOAD_KEYS,
  probeAndLoad,
  Recorder,
  release,
  startSite,
  until,
  write,
  type Site,
} from './lib/workload.js';

let server: FencegateProcess | null = null;
let site: Site | null = null;
let redis: RedisProcess | null = null;
afterEach(async () => {
  await server?.kill();
  await redis?.stop();
  await site?.close();
  server = site = redis = null;
});

describe('store amnesia (Redis restarted empty under a running gateway)', () => {
  it('mints above every earlier token and refuses every old token, stale or forged', async () => {
    redis = await startRedis({ durable: false });
    site = await startSite();
    server = await startFencegate([
      '--store',
      redis.url,
      '--allow-volatile-redis',
      '--policies',
      site.policy,
    ]);
    const gw = server;
    const upstream = site.upstream;
    const rec = new Recorder();

    const { oldLease, newLease, load } = await probeAndLoad(gw, rec);

    await redis.restart(); // no AOF, no RDB: every key, lease, fence and the epoch record are gone
    const restartedAt = performance.now();
    const before = rec.grants.filter((g) => g.receivedAt < restartedAt);
    const maxBefore = before.reduce((m, g) => (BigInt(g.token) > m ? BigInt(g.token) : m), 0n);

    // Before anything is minted again, every old token is refused and forwarded nowhere:
    // 503 while the gateway reconnects, then refused by the store's verdict (nothing was
    // issued for the key in the new state: forged; or below the new floor: stale).
    const verdicts: (number | string)[] = [];
    await until(
      'the gateway judges old tokens against the new state',
      async () => {
        let judged = true;
        for (const [token, writer] of [
          [newLease.token, 'new'],
          [oldLease.token, 'old'],
        ] as const) {
          const w = await write(gw.data, 'probe', token, writer, rec);
          expect(applied(upstream, w.requestId)).toBe(false);
          if (w.status === 503) judged = false;
          else verdicts.push(w.status);
        }
        return judged;
      },
      600,
    );
    expect(verdicts.length).toBeGreaterThan(0);
    for (const v of verdicts) expect([403, 409]).toContain(v); // 403 observed: nothing issued for the key

    // A new grant is above every token of the lost state, on every key.
    const fresh = await acquireEventually(gw.control, 'order:probe', 'fresh', rec, { ttlMs: 600_000 });
    expect(BigInt(fresh.token)).toBeGreaterThan(maxBefore);
    await until(
      'a write with the fresh token is admitted',
      async () => (await write(gw.data, 'probe', fresh.token, 'fresh', rec)).status === 200,
      600,
    );
    // Old tokens are below the new floor: stale. A token above anything issued: forged.
    for (const [token, writer, status] of [
      [newLease.token, 'new', 409],
      [oldLease.token, 'old', 409],
      [(BigInt(fresh.token) + 1000n).toString(), 'fresh', 403],
    ] as const) {
      const w = await write(gw.data, 'probe', token, writer, rec);
      expect(w.status).toBe(status);
      expect(applied(upstream, w.requestId)).toBe(false);
    }
    await release(gw.control, fresh);

    const ackAtRestart = load.acknowledged;
    await until('the workload writes again', async () => load.acknowledged >= ackAtRestart + 6, 600);
    await load.stop();

    const after = rec.grants.filter((g) => g.sentAt > restartedAt);
    expect(after.length).toBeGreaterThan(LOAD_KEYS.length);
    for (const g of after) expect(BigInt(g.token)).toBeGreaterThan(maxBefore);
    expect(grantOrderViolation(rec.grants)).toBeNull();
    const result = checkRun(upstream, rec);
    expect(result.ok, result.ok ? '' : formatViolation(result)).toBe(true);
    expect(result.stats.acknowledged).toBeGreaterThan(10);
  }, 150_000);
});
