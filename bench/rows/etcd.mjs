/**
 * Fenced writes on the etcd store (a 3-member cluster on this machine, bench/etcd-cluster.mjs):
 * with admission holds (the default) and with every write asking the store
 * (--admission-hold-ms 0); then the scale-out row: two gateway processes on the same
 * cluster, each driven by its own wrk at the same time, their throughput summed, against
 * the one gateway's.
 */
import { startEtcd } from '../etcd-cluster.mjs';
import { acquireTokens, fencegate, run, stop, summarize, WARMUP } from '../core.mjs';

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
    const two = await fencegate(etcd.spec, ctx.policyDir);
    await Promise.all([
      run(one.data, { tokens, seconds: WARMUP }),
      run(two.data, { tokens, seconds: WARMUP }),
    ]);
    const [a, b] = await Promise.all([run(one.data, { tokens }), run(two.data, { tokens })]);
    const both = {
      name: 'fencegate fenced, etcd store, 2 gateway processes (sum of both)',
      rps: a.rps + b.rps,
      p50: Math.max(a.p50, b.p50),
      p99: Math.max(a.p99, b.p99),
      total: a.requests + b.requests,
      bad: a.bad + b.bad,
      cpu: {},
    };
    ctx.r.etcdScale = { one: fenced.rps, two: both.rps };
    await stop(two.child);
    await stop(one.child);
    for (const p of etcd.procs) await stop(p);
    return [fenced, everyWrite, both];
  },
};
