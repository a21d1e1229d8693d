/**
 * The goals' ratios: the bare proxy and the Redis process's fenced, unfenced and stale writes
 * (and the holds-off process), in turns (the rows above ran one after another, minutes apart).
 * Needs both the redis and the stale groups.
 */
import { inTurns, run } from '../core.mjs';

export default {
  name: 'turns',
  when: (want) => want('redis') && want('stale'),
  async run(ctx) {
    const { bare, redis, redisChild, redisNoHold, tokens } = ctx;
    ctx.say(`in turns: bare, fenced, unfenced, stale …`);
    const staleOld = { base: 'stale', tokens: ctx.staleTokens, expect: 409 };
    const on = (url, opts, proxy, store) => (seconds) =>
      ctx.cpuOf(proxy, store, { run: () => run(url, { ...opts, seconds }) });
    ctx.r.turns = await inTurns([
      { name: 'bare proxy', measure: on(bare.m[1], {}, bare.child.pid, null) },
      { name: 'fenced', measure: on(redis.data, { tokens }, redis.child.pid, redisChild.pid) },
      { name: 'unfenced', measure: on(redis.data, { base: 'open' }, redis.child.pid, redisChild.pid) },
      { name: 'stale', measure: on(redis.data, staleOld, redis.child.pid, redisChild.pid) },
      {
        name: 'fenced, holds off',
        measure: on(redisNoHold.data, { tokens }, redisNoHold.child.pid, redisChild.pid),
      },
    ]);
    return [];
  },
};
