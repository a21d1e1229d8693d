/**
 * Gateway memory against the number of distinct locks it has seen (bench/memory-locks.mjs):
 * RSS after 10 000 and after 200 000 distinct locks, on the embedded store (with its default
 * lockRetentionMs, 15 min, longer than the run: nothing is retired; and with 60 s, to show
 * the data file bounded by the locks used within the retention) and on a private durable
 * Redis. Runs after the shared gateways have stopped, one gateway at a time.
 */
import { measureLockMemory } from '../memory-locks.mjs';

export default {
  name: 'lockmem',
  groups: ['lockmem'],
  async run(ctx) {
    ctx.r.lockMemory = [];
    const runs = [
      { store: 'embedded', lockRetentionMs: null },
      { store: 'embedded', lockRetentionMs: 60_000 },
      { store: 'redis', lockRetentionMs: null },
    ];
    for (const { store, lockRetentionMs } of runs) {
      ctx.say(`lock memory: ${store}, 10k then 200k distinct locks`);
      const { output: _output, ...row } = await measureLockMemory({ store, lockRetentionMs, log: ctx.say });
      ctx.r.lockMemory.push(row);
    }
    return [];
  },
};
