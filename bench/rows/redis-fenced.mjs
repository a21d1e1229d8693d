/**
 * Fenced writes on the Redis process. Measured with the rows that are read against it: the
 * latency rows (their second rate is half of it), the stale flood and --workers 2 (their ratios).
 */
import { run, summarize, WARMUP } from '../core.mjs';

export default {
  name: 'redis-fenced',
  groups: ['redis', 'latency', 'stale', 'workers'],
  async run(ctx) {
    const { redis, redisChild, tokens } = ctx;
    ctx.say(`fencegate fenced, redis …`);
    await run(redis.data, { tokens, seconds: WARMUP });
    ctx.r.redisResult = await ctx.withRss(
      summarize(
        'fencegate fenced, redis store (AOF always)',
        await ctx.cpuOf(redis.child.pid, redisChild.pid, { run: () => run(redis.data, { tokens }) }),
      ),
      redis.child.pid,
    );
    return [ctx.r.redisResult];
  },
};
