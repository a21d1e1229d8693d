/** The floor the machine sets: wrk straight at the upstream, no proxy. */
import { run, summarize } from '../core.mjs';

export default {
  name: 'direct',
  groups: ['direct'],
  async run(ctx) {
    ctx.say(`direct upstream …`);
    await run(ctx.upstream, { seconds: 2 }); // warm-up
    return [summarize('direct upstream', await ctx.cpuOf(null, null, { run: () => run(ctx.upstream) }))];
  },
};
