/**
 * Fenced writes on the etcd store (a 3-member cluster on this machine, bench/etcd-cluster.mjs):
 * with admission holds (the default) and with every write asking the store
 * (--admission-hold-ms 0); then the scale-out row: two gateway processes on the same
 * cluster, each driven by its own wrk at the same time, their throughput summed, against
 * the one gateway's.
 */
import { startEtcd } from '../etcd-cluster.mjs';
import { acquireTokens, fencegate, run, stop, summarize, twoGateways, WARMUP } from '../core.mjs';

export default {
  name: 'etcd',
  groups: ['etcd'],
  async run(ctx) {
    const etcd = await startEtcd(ctx.tmp);
    const one = await fencegate(etcd.spec, ctx.policyDir);
    const tokens = await acquireTokens(one.control, 'order');
    ctx.say(`fencegate fenced, etcd …`);
    await run(one.data, { tokens, seconds: WARMUP });
    const fenced = summarize(
      'fencegate fenced, etcd store (3 members)',
      await ctx.cpuOf(one.child.pid, null, { run: () => run(one.data, { tokens }) }),
    );
    ctx.say(`fencegate fenced, etcd, --admission-hold-ms 0 …`);
    const asking = await fencegate(etcd.spec, ctx.policyDir, ['--admission-hold-ms', '0']);
    await run(asking.data, { tokens, seconds: WARMUP });
    const everyWrite = summarize(
      'fencegate fenced, etcd store, --admission-hold-ms 0 (every write asks the store)',
      await ctx.cpuOf(asking.child.pid, null, { run: () => run(asking.data, { tokens }) }),
    );
    await stop(asking.child);
    ctx.say(`fencegate fenced, etcd, two gateways at once …`);
    const both = await twoGateways(
      one,
      etcd.spec,
      ctx.policyDir,
      tokens,
      'fencegate fenced, etcd store, 2 gateway processes (sum of both)',
    );
    ctx.r.etcdScale = { one: fenced.rps, two: both.rps };
    await stop(one.child);
    for (const p of etcd.procs) await stop(p);
    return [fenced, everyWrite, both];
  },
};
