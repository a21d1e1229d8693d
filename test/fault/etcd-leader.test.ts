/**
 * The etcd store under the loss of members, on a private 3-member cluster, while clients
 * acquire and write through `fencegate serve`:
 *
 * - kill -9 of the leader (a minority): a new leader is elected, grants and fenced writes
 *   go on, the probe lease granted before survives (a write with its token is still
 *   admitted, an older token still refused), the next grant is above every earlier one;
 *   the killed member rejoins.
 * - kill -9 of two members (no quorum): fenced writes get 503 and nothing is forwarded,
 *   /readyz says 503, unfenced reads go on; once they are back the fence has not gone
 *   back and tokens keep increasing (outageScenario).
 *
 * Both runs end with the grant-order check and the history checker. See docs/stores-etcd.md.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEtcdCluster, type EtcdCluster } from '../helpers/etcd-cluster.js';
import { startFencegate, type FencegateProcess } from '../helpers/procs.js';
import { outageScenario } from './lib/outage.js';
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
let cluster: EtcdCluster | null = null;
afterEach(async () => {
  await server?.kill();
  cluster?.stop();
  await site?.close();
  server = site = cluster = null;
});

async function serveOn(c: EtcdCluster): Promise<{ gw: FencegateProcess; site: Site }> {
  site = await startSite();
  server = await startFencegate(['--store', c.spec, '--policies', site.policy]);
  return { gw: server, site };
}

describe('etcd store: members lost under load', () => {
  it('kill -9 of the leader: a new leader serves, no acknowledged grant is lost, no token reissued', async () => {
    cluster = await startEtcdCluster();
    const c = cluster;
    const { gw, site: s } = await serveOn(c);
    const rec = new Recorder();
    const { oldLease, newLease, load } = await probeAndLoad(gw, rec);
    const grantsBefore = rec.grants.length;
    const acknowledgedBefore = load.acknowledged;

    const leader = await c.leader();
    await c.kill(leader);
    const next = await c.leader();
    expect(next.name).not.toBe(leader.name);
    await until(
      'the workload writes after the election',
      async () => load.acknowledged >= acknowledgedBefore + 10,
      600,
    );
    // The lease granted before the loss is still the lock's: its writes go on, the older one's do not.
    expect((await write(gw.data, 'probe', newLease.token, 'new', rec)).status).toBe(200);
    const stale = await write(gw.data, 'probe', oldLease.token, 'old', rec);
    expect(stale.status).toBe(409);
    expect(applied(s.upstream, stale.requestId)).toBe(false);

    await c.start(leader); // rejoins as a follower
    await release(gw.control, newLease);
    const after = await acquireEventually(gw.control, 'order:probe', 'after', rec);
    expect(BigInt(after.token)).toBeGreaterThan(BigInt(newLease.token));
    await release(gw.control, after);
    await load.stop();

    expect(rec.grants.length).toBeGreaterThan(grantsBefore + 3);
    expect(grantOrderViolation(rec.grants)).toBeNull();
    const result = checkRun(s.upstream, rec);
    expect(result.ok, result.ok ? '' : formatViolation(result)).toBe(true);
  }, 150_000);

  it('kill -9 of two members (no quorum): fails closed, the fence never goes back once they return', async () => {
    cluster = await startEtcdCluster();
    const c = cluster;
    const { gw, site: s } = await serveOn(c);
    const [a, b] = [c.members[0]!, c.members[1]!];
    await outageScenario(gw, s, {
      down: async () => {
        await c.kill(a);
        await c.kill(b);
      },
      up: async () => {
        await Promise.all([c.start(a), c.start(b)]);
      },
    });
  }, 180_000);
});
