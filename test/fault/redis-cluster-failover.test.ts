/**
 * The Redis store on a Redis Cluster (3 primaries, a replica each) while clients acquire
 * and write through `fencegate serve`: kill -9 of the primary that holds a live lease, or
 * of the one that holds the epoch record, and its replica takes over (cluster-node-timeout 1 s).
 *
 * Replication is asynchronous, so the promoted replica may lack grants and fence moves
 * its primary acknowledged. What must hold (ADR 0019 on every primary, docs/adr/0021):
 * the gateway sees a promoted primary it has not verified, the epoch floor is raised above
 * every token granted before, the lease live at the failover is superseded (its writes
 * refused, never applied), the next grant is above every earlier one, the workload writes
 * again, and the whole run passes the grant-order check and the history checker. What is
 * lost is reported: the leases live at the failover, and the 503s while the cluster failed
 * over and the gateway held writes for the lock-delay.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { keySlot } from '../../src/store/redis/cluster.js';
import { lockKeys } from '../../src/store/redis/keys.js';
import { startFencegate, type FencegateProcess } from '../helpers/procs.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-cluster.js';
import { withCluster } from '../helpers/redis-cluster-seed.js';
import {
  acquireEventually,
  applied,
  checkRun,
  formatViolation,
  grantOrderViolation,
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
let cluster: RedisCluster | null = null;
afterEach(async () => {
  await server?.kill();
  cluster?.stop();
  await site?.close();
  server = site = cluster = null;
});

/** The namespace `fencegate serve` uses on Redis by default. */
const PREFIX = 'fg';

async function floorOf(spec: string): Promise<bigint> {
  return withCluster(spec, async (c) => BigInt((await c.hget(`${PREFIX}:epoch`, 'floor')) ?? '0'));
}

/** Which primary is killed: the one that holds the probe's lease, or the one that holds the epoch record. */
const VICTIMS = [
  { what: 'the primary holding a live lease', key: () => lockKeys(PREFIX, 'order:probe').inf },
  { what: 'the primary holding the epoch record', key: () => `${PREFIX}:epoch` },
];

describe('Redis Cluster: a primary lost under load', () => {
  it.each(VICTIMS)(
    'kill -9 of $what: the replica takes over, the floor is raised, no token goes back, no stale write is admitted',
    async ({ key }) => {
      cluster = await startRedisCluster();
      const c = cluster;
      site = await startSite();
      server = await startFencegate(['--store', c.spec, '--policies', site.policy]);
      const gw = server;
      const rec = new Recorder();
      const { oldLease, newLease, load } = await probeAndLoad(gw, rec);
      const floorBefore = await floorOf(c.spec);
      const victim = await c.primaryOfSlot(keySlot(key()));
      const before = await c.topology();
      const victimId = before.find((n) => n.port === victim.port)?.id;
      const replica = before.find((n) => n.masterId === victimId);
      expect(replica, 'the killed primary has a replica').toBeDefined();
      const acknowledgedBefore = load.acknowledged;
      const opsBefore = rec.operations.length;
      const grantsBefore = rec.grants.length;

      const killedAt = performance.now();
      await c.kill(victim);
      await until(
        'the replica takes over',
        async () => (await c.topology()).find((n) => n.id === replica?.id)?.role === 'master',
        300,
      );
      await c.waitOk(30_000);
      const promotedAfterMs = performance.now() - killedAt;
      await until(
        'the workload writes after the failover',
        async () => load.acknowledged >= acknowledgedBefore + 10,
        600,
      );
      const writingAfterMs = performance.now() - killedAt;

      // The epoch was raised above every token granted before the failover.
      const floorAfter = await floorOf(c.spec);
      expect(floorAfter).toBeGreaterThan(floorBefore);
      // Grants answered before the kill (those in flight then may have been answered by the promoted replica).
      const highestBefore = rec.grants
        .slice(0, grantsBefore)
        .reduce((m, g) => (BigInt(g.token) > m ? BigInt(g.token) : m), 0n);
      expect(floorAfter).toBeGreaterThanOrEqual(highestBefore);

      // The lease live at the failover is superseded: its write and the older one are refused, never applied.
      const superseded = await write(gw.data, 'probe', newLease.token, 'new', rec);
      expect(superseded.status).not.toBe(200);
      expect(superseded.status).not.toBe(201);
      expect(applied(site.upstream, superseded.requestId)).toBe(false);
      const stale = await write(gw.data, 'probe', oldLease.token, 'old', rec);
      expect(stale.status).not.toBe(200);
      expect(applied(site.upstream, stale.requestId)).toBe(false);

      // The next grant of the probe lock is above the new floor, hence above every earlier token.
      const next = await acquireEventually(gw.control, 'order:probe', 'after', rec);
      expect(BigInt(next.token)).toBeGreaterThan(floorAfter);
      expect(BigInt(next.token)).toBeGreaterThan(highestBefore);
      expect((await write(gw.data, 'probe', next.token, 'after', rec)).status).toBe(200);
      await release(gw.control, next);

      // The killed node comes back as a replica of the one that took over.
      await c.start(victim);
      await c.waitOk(30_000);
      await load.stop();

      const during = rec.operations.slice(opsBefore);
      const refused503 = during.filter((o) => o.status === 503).length;
      console.log(
        `redis cluster failover: replica promoted ${Math.round(promotedAfterMs)} ms after kill -9, ` +
          `workload writing again after ${Math.round(writingAfterMs)} ms; ${during.length} writes after the kill, ` +
          `${refused503} answered 503; floor ${floorBefore} -> ${floorAfter}; highest token before ${highestBefore}`,
      );
      expect(grantOrderViolation(rec.grants)).toBeNull();
      const result = checkRun(site.upstream, rec);
      expect(result.ok, result.ok ? '' : formatViolation(result)).toBe(true);
    },
    180_000,
  );
});
