/**
 * Stale floods on the Redis process: every lock's token superseded by a newer one that was
 * written once, then the old tokens' PUTs (409), with Redis INFO commandstats over them; then
 * forged tokens (each lock's current token + 1000, never issued: 403 after one admission round
 * trip each). Leaves ctx.staleTokens for the rows measured in turns.
 */
import { Redis } from 'ioredis';
import { acquireLeases, commandCalls, LOCKS, release, run, summarize, WARMUP } from '../core.mjs';

export default {
  name: 'stale',
  groups: ['stale'],
  async run(ctx) {
    const { r, redis, redisChild, say, cpuOf } = ctx;
    // A stale flood: every lock's token superseded by a newer one that was written once.
    say(`fencegate stale writes, redis …`);
    const oldLeases = await acquireLeases(redis.control, 'stale');
    for (const l of oldLeases) await release(redis.control, l);
    const newLeases = await acquireLeases(redis.control, 'stale');
    const staleTokens = oldLeases.map((l) => l.token);
    ctx.staleTokens = staleTokens;
    for (let i = 0; i < LOCKS; i++) {
      const res = await fetch(`${redis.data}/stale/${i}`, {
        method: 'PUT',
        headers: { 'fencing-token': newLeases[i].token },
        body: 'x',
      });
      if (res.status !== 200) throw new Error(`stale setup write: ${res.status} ${await res.text()}`);
    }
    const probe = new Redis(`redis://127.0.0.1:${ctx.redisPort}`);
    const stale = { base: 'stale', tokens: staleTokens, expect: 409 };
    await run(redis.data, { ...stale, seconds: WARMUP });
    const commandsBefore = await commandCalls(probe);
    const staleMeasured = await cpuOf(redis.child.pid, redisChild.pid, { run: () => run(redis.data, stale) });
    const commandsAfter = await commandCalls(probe);
    probe.disconnect();
    // Here the expected answer is 409: "bad" counts anything else (wrk-put.lua checks each).
    r.staleResult = summarize('fencegate, stale writes refused (409), redis store', staleMeasured);
    r.staleCommands = Object.entries(commandsAfter)
      .map(([cmd, n]) => [cmd, n - (commandsBefore[cmd] ?? 0)])
      .filter(([cmd, n]) => n > 0 && cmd !== 'info');

    // Forged tokens: each lock's current token + 1000, never issued: 403 token-invalid after
    // one admission round trip each (no cache can know the highest token issued).
    say(`fencegate forged tokens, redis …`);
    const forged = {
      base: 'stale',
      tokens: newLeases.map((l) => (BigInt(l.token) + 1000n).toString()),
      expect: 403,
    };
    await run(redis.data, { ...forged, seconds: WARMUP });
    r.forgedResult = summarize(
      'fencegate, forged tokens refused (403), redis store',
      await cpuOf(redis.child.pid, redisChild.pid, { run: () => run(redis.data, forged) }),
    );
    return [r.staleResult, r.forgedResult];
  },
};
