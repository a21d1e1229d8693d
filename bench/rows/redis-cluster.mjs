/**
 * Fenced writes on the Redis store on a Redis Cluster (3 primaries on this machine, AOF
 * always: bench/redis-cluster.mjs), then the scale-out row: two gateway processes on the
 * same cluster, each driven by its own wrk at the same time, their throughput summed,
 * against the one gateway's.
 */
import { startRedisCluster } from '../redis-cluster.mjs';
import { acquireTokens, fencegate, run, stop, summarize, twoGateways, WARMUP } from '../core.mjs';

export default {
  name: 'redis-cluster',
  groups: ['rediscluster'],
  async run(ctx) {
    const cluster = await startRedisCluster(ctx.tmp);
    const one = await fencegate(cluster.spec, ctx.policyDir);
    const tokens = await acquireTokens(one.control, 'order');
    ctx.say(`fencegate fenced, redis cluster …`);
    await run(one.data, { tokens, seconds: WARMUP });
    const fenced = summarize(
      'fencegate fenced, Redis Cluster store (3 primaries, AOF always)',
      await ctx.cpuOf(one.child.pid, null, { run: () => run(one.data, { tokens }) }),
    );
    ctx.say(`fencegate fenced, redis cluster, two gateways at once …`);
    const both = await twoGateways(
      one,
      cluster.spec,
      ctx.policyDir,
      tokens,
      'fencegate fenced, Redis Cluster store, 2 gateway processes (sum of both)',
    );
    ctx.r.redisClusterScale = { one: fenced.rps, two: both.rps };
    await stop(one.child);
    for (const p of cluster.procs) await stop(p);
    return [fenced, both];
  },
};
