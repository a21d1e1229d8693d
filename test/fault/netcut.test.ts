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
import { afterEach, describe, it } from 'vitest';
import { startFencegate, type FencegateProcess } from '../helpers/procs.js';
import { createNetns, startPostgresIn, startRedisIn, type NetNs, type NsStore } from './lib/netns.js';
import { outageScenario } from './lib/outage.js';
import { startSite, type Site } from './lib/workload.js';

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
      const net = ns;
      await outageScenario(server, site, { down: () => net.cut(), up: () => net.restore() });
    }, 180_000);
  },
);
