/** The same writes on a `check: sequencer` route: the SDK's headers (token and sequencer). */
import { acquireLeases, run, summarize, WARMUP } from '../core.mjs';

export default {
  name: 'sequencer',
  groups: ['sequencer'],
  async run(ctx) {
    const { redis, redisChild } = ctx;
    ctx.say(`fencegate fenced, redis, check: sequencer …`);
    const leases = await acquireLeases(redis.control, 'sequenced');
    const sequenced = {
      base: 'sequenced',
      tokens: leases.map((l) => l.token),
      sequencers: leases.map((l) => l.sequencer),
    };
    await run(redis.data, { ...sequenced, seconds: WARMUP });
    return [
      summarize(
        'fencegate fenced, redis store, check: sequencer',
        await ctx.cpuOf(redis.child.pid, redisChild.pid, { run: () => run(redis.data, sequenced) }),
      ),
    ];
  },
};
