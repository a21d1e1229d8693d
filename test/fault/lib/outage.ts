/**
 * The store-outage scenario shared by the store-crash and network-cut tests: one gateway
 * in front of the sample upstream, a refused probe token and a running workload
 * (probeAndLoad), then the store goes away and comes back.
 *
 * Checks, while it is away: /readyz 503, fenced writes 503 and never applied, unfenced
 * reads 200, the gateway process alive. After it is back: a write is admitted again,
 * /readyz 200, the token refused before is still refused (the fence did not go back),
 * the next grant is above every earlier one, the workload writes again, and the whole
 * run passes the grant-order check and the history checker.
 */
import { expect } from 'vitest';
import type { FencegateProcess } from '../../helpers/procs.js';
import {
  acquireEventually,
  applied,
  checkRun,
  formatViolation,
  grantOrderViolation,
  probeAndLoad,
  read,
  readyz,
  Recorder,
  release,
  sleep,
  until,
  write,
  type Site,
} from './workload.js';

export interface Outage {
  /** Take the store away (crash it, cut its link). */
  down(): Promise<void>;
  /** Bring it back (restart on the same data, restore the link). */
  up(): Promise<void>;
}

/** Fenced writes tried (each must get 503) while the store is away. */
const WRITES_WHILE_DOWN = 5;

export async function outageScenario(gw: FencegateProcess, site: Site, outage: Outage): Promise<void> {
  const rec = new Recorder();
  const upstream = site.upstream;
  const { oldLease, newLease, load } = await probeAndLoad(gw, rec);
  const grantsBefore = rec.grants.length;

  await outage.down();
  const downAt = rec.operations.length;
  const gatewayAlive = () => {
    if (gw.proc.exitCode !== null || gw.proc.signalCode !== null) {
      throw new Error(`the gateway process died when the store went away:\n${gw.output().slice(-1500)}`);
    }
  };
  await until(
    'readyz reports the store down',
    async () => {
      gatewayAlive();
      return (await readyz(gw.control)) === 503;
    },
    200,
  );
  for (let i = 0; i < WRITES_WHILE_DOWN; i++) {
    const w = await write(gw.data, 'probe', newLease.token, 'new', rec);
    expect(w.status).toBe(503);
    expect(applied(upstream, w.requestId)).toBe(false);
    expect(await read(gw.data, 'probe')).toBe(200);
  }
  await sleep(1000); // the workload runs into the outage too
  gatewayAlive();
  const whileDown = rec.operations.slice(downAt).filter((op) => op.status === 503).length;
  expect(whileDown).toBeGreaterThanOrEqual(WRITES_WHILE_DOWN);

  await outage.up();
  await until(
    'a write is admitted after the store came back',
    async () => (await write(gw.data, 'probe', newLease.token, 'new', rec)).status === 200,
    600,
  );
  await until('readyz reports the store up', async () => (await readyz(gw.control)) === 200, 200);
  const stale = await write(gw.data, 'probe', oldLease.token, 'old', rec);
  expect(stale.status).toBe(409);
  expect(applied(upstream, stale.requestId)).toBe(false);
  await release(gw.control, newLease);
  const after = await acquireEventually(gw.control, 'order:probe', 'after', rec);
  expect(BigInt(after.token)).toBeGreaterThan(BigInt(newLease.token));
  await release(gw.control, after);
  const acknowledgedAtUp = load.acknowledged;
  await until('the workload writes again', async () => load.acknowledged >= acknowledgedAtUp + 6, 600);
  await load.stop();

  expect(rec.grants.length).toBeGreaterThan(grantsBefore);
  expect(grantOrderViolation(rec.grants)).toBeNull();
  const result = checkRun(upstream, rec);
  expect(result.ok, result.ok ? '' : formatViolation(result)).toBe(true);
  expect(result.stats.acknowledged).toBeGreaterThan(10);
  expect(result.stats.refused).toBeGreaterThan(WRITES_WHILE_DOWN);
}
