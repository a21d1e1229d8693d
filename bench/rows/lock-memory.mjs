/**
 * Gateway memory against the number of distinct locks it has seen (bench/memory-locks.mjs):
 * RSS after 10 000 and after 200 000 distinct locks, on the embedded store and on a private
 * durable Redis. Runs after the shared gateways have stopped, one gateway at a time.
 */
import { measureLockMemory } from '../memory-locks.mjs';

export default {
  name: 'lockmem',
  groups: ['lockmem'],
  async run(ctx) {
    ctx.r.lockMemory = [];
    for (const store of ['embedded', 'redis']) {
      ctx.say(`lock memory: ${store}, 10k then 200k distinct locks`);
      const { output: _output, ...row } = await measureLockMemory({ store, log: ctx.say });
      ctx.r.lockMemory.push(row);
    }
    return [];
  },
};
