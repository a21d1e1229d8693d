/**
 * The bare @fastify/http-proxy: every ratio's reference, and it sets the latency rows' rate,
 * so it is always measured (groups: null). Leaves ctx.bare (its process and URL) running for
 * the rows that measure beside it; the runner stops it.
 */
import { run, start, summarize, WARMUP } from '../core.mjs';

export default {
  name: 'bare-proxy',
  groups: null,
  async run(ctx) {
    const bare = await start(process.execPath, ['bench/bare-proxy.mjs', ctx.upstream], /listening (\S+)/);
    ctx.bare = bare;
    ctx.say(`bare @fastify/http-proxy …`);
    await run(bare.m[1], { seconds: WARMUP });
    const bareResult = summarize(
      'bare @fastify/http-proxy',
      await ctx.cpuOf(bare.child.pid, null, { run: () => run(bare.m[1]) }),
    );
    ctx.r.bareResult = bareResult;
    // The latency rows' first rate.
    ctx.r.half = Math.max(100, Math.floor(bareResult.rps / 2));
    return [bareResult];
  },
};
