/**
 * Network cut between the gateway and its store: the store (a durable Redis, or a
 * Postgres cluster of the test's own) runs in a network namespace of its own, reached over a veth pair on a private /30; fencegate runs in the root
 * namespace. Taking the link down cuts the wire (the TCP connection is not closed by
 * anyone: the gateway only sees silence and no route). While cut, fenced writes get
 * 503 and reach nothing, /readyz says 503, unfenced reads go on; once the link is
 * back, writes are admitted again, the fence has kept its place, and the whole run
 * passes the history checker. See docs/safety-faults.md.
 *
 * Needs root and iproute2 (ip netns, veth). If this sandbox cannot create them the
 * test fails; it never skips.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startFencegate, type FencegateProcess } from '../helpers/procs.js';
import { createNetns, startPostgresIn, startRedisIn, type NetNs, type NsStore } from './lib/netns.js';
import {
  applied,
  checkRun,
  formatViolation,
  grantOrderViolation,
  read,
  readyz,
  Recorder,
  release,
  sleep,
  startSite,
  until,
  write,
  type Site,
  probeAndLoad,
} from './lib/workload.js';

let ns: NetNs | null = null;
let store: NsStore | null = null;
let server: FencegateProcess | null = null;
let site: Site | null = null;
afterEach(async () => {
  await server?.kill();
  await store?.stop();
  await ns?.destroy();
  await site?.close();
  server = store = ns = site = null;
});

const STORES = { redis: startRedisIn, postgres: startPostgresIn } as const;

describe.each(Object.keys(STORES) as (keyof typeof STORES)[])(
  'network cut between gateway and store (netns + veth, %s)',
  (kind) => {
    it('fails closed while cut, recovers after, and the history holds', async () => {
      ns = await createNetns();
      store = await STORES[kind](ns);
      site = await startSite();
      server = await startFencegate(['--store', store.url, '--policies', site.policy]);
      const gw = server;
      const net = ns;
      const upstream = site.upstream;
      const rec = new Recorder();

      const { oldLease, newLease, load } = await probeAndLoad(gw, rec);

      await net.cut();
      const cutAt = rec.operations.length;
      await until('readyz reports the store down', async () => (await readyz(gw.control)) === 503, 200);
      for (let i = 0; i < 3; i++) {
        const w = await write(gw.data, 'probe', newLease.token, 'new', rec);
        expect(w.status).toBe(503);
        expect(applied(upstream, w.requestId)).toBe(false);
        expect(await read(gw.data, 'probe')).toBe(200);
      }
      await sleep(1000); // the workload runs into the cut too
      const duringCut = rec.operations.slice(cutAt);
      expect(duringCut.filter((op) => op.status === 503).length).toBeGreaterThanOrEqual(3);

      await net.restore();
      await until(
        'a write is admitted after the link came back',
        async () => (await write(gw.data, 'probe', newLease.token, 'new', rec)).status === 200,
        600,
      );
      await until('readyz reports the store up', async () => (await readyz(gw.control)) === 200, 200);
      const stale = await write(gw.data, 'probe', oldLease.token, 'old', rec);
      expect(stale.status).toBe(409);
      expect(applied(upstream, stale.requestId)).toBe(false);
      const ackAtRestore = load.acknowledged;
      await until('the workload writes again', async () => load.acknowledged >= ackAtRestore + 6, 600);
      await load.stop();
      await release(gw.control, newLease);

      expect(grantOrderViolation(rec.grants)).toBeNull();
      const result = checkRun(upstream, rec);
      expect(result.ok, result.ok ? '' : formatViolation(result)).toBe(true);
      expect(result.stats.acknowledged).toBeGreaterThan(10);
    }, 180_000);
  },
);
