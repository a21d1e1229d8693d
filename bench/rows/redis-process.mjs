/**
 * Not a row of the table: the private redis-server (AOF appendfsync always, the safe setting)
 * and the one-worker gateway on it that the Redis rows share, with sequencer keys (the
 * Postgres and Redis stores take them from a file) and one lease per lock. Leaves ctx.redis,
 * ctx.redisChild, ctx.redisPort and ctx.tokens; the runner stops the gateway, the children list
 * the redis-server.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { freePort } from '../lib.mjs';
import { acquireTokens, fencegate, ROOT, start, startRedis } from '../core.mjs';

export default {
  name: 'redis-process',
  groups: ['redis', 'stale', 'sequencer', 'workers', 'latency', 'soak', 'pgkind'],
  async run(ctx) {
    ctx.redisPort = await freePort();
    const redisDir = join(ctx.tmp, 'redis');
    await mkdir(redisDir);
    ctx.redisChild = await startRedis(ctx.redisPort, redisDir);
    // Sequencer keys for the Redis process (Postgres and Redis stores take them from a file).
    const keyFile = join(ctx.tmp, 'sequencer-keys.json');
    await start(join(ROOT, 'bin/fencegate.js'), ['keys', 'init', keyFile], /made/);
    ctx.redis = await fencegate(`redis://127.0.0.1:${ctx.redisPort}`, ctx.policyDir, [
      '--sequencer-keys',
      keyFile,
    ]);
    ctx.tokens = await acquireTokens(ctx.redis.control, 'order');
    return [];
  },
};
