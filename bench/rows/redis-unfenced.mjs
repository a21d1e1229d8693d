/**
 * On the Redis store: the unfenced route on the same process (its CPU beside the fenced
 * writes'), and the same fenced writes through a second process whose every write asks the
 * store (`--admission-hold-ms 0`, docs/adr/0016-admission-holds.md): what the holds save, side
 * by side. Leaves ctx.redisNoHold running for the rows measured in turns.
 */
import { fencegate, run, summarize, WARMUP } from '../core.mjs';

export default {
  name: 'redis-unfenced',
  groups: ['redis'],
  async run(ctx) {
    const { redis, redisChild, tokens, say, cpuOf } = ctx;
    // Unfenced on the same process, for its CPU beside the fenced writes'.
    say(`fencegate unfenced route, redis process …`);
    await run(redis.data, { base: 'open', seconds: WARMUP });
    ctx.r.unfencedRedis = summarize(
      'fencegate, unfenced route (the redis-store process)',
      await cpuOf(redis.child.pid, redisChild.pid, { run: () => run(redis.data, { base: 'open' }) }),
    );
    // The same fenced writes through a process whose every write asks the store (no
    // admission holds, docs/adr/0016-admission-holds.md): what the holds save, side by side.
    say(`fencegate fenced, redis, --admission-hold-ms 0 …`);
    const redisNoHold = await fencegate(`redis://127.0.0.1:${ctx.redisPort}`, ctx.policyDir, [
      '--admission-hold-ms',
      '0',
    ]);
    ctx.redisNoHold = redisNoHold;
    await run(redisNoHold.data, { tokens, seconds: WARMUP });
    const noHold = summarize(
      'fencegate fenced, redis store, --admission-hold-ms 0 (every write asks the store)',
      await cpuOf(redisNoHold.child.pid, redisChild.pid, { run: () => run(redisNoHold.data, { tokens }) }),
    );
    return [ctx.r.unfencedRedis, noHold];
  },
};
