/**
 * The same fenced writes through `serve --workers 2` on the same store (the other rows are
 * `--workers 1`); the one-worker gateway stays idle meanwhile. RSS: the largest of the three
 * processes (primary and two workers).
 */
import { fencegate, rssKiB, run, stop, summarize, treePids, WARMUP } from '../core.mjs';

export default {
  name: 'workers',
  groups: ['workers'],
  async run(ctx) {
    const { redisChild, tokens } = ctx;
    ctx.say(`fencegate fenced, redis, --workers 2 …`);
    const redis2 = await fencegate(`redis://127.0.0.1:${ctx.redisPort}`, ctx.policyDir, ['--workers', '2']);
    await run(redis2.data, { tokens, seconds: WARMUP });
    const workersResult = summarize(
      'fencegate fenced, redis store, --workers 2',
      await ctx.cpuOf(redis2.child.pid, redisChild.pid, { run: () => run(redis2.data, { tokens }) }),
    );
    // The largest of the three processes (primary and two workers).
    const workerRss = await Promise.all((await treePids(redis2.child.pid)).map((pid) => rssKiB(pid)));
    workersResult.rssMiB = Math.max(...workerRss) / 1024;
    ctx.r.workersResult = workersResult;
    await stop(redis2.child);
    return [workersResult];
  },
};
