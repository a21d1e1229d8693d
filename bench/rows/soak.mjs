/**
 * Memory over SOAK s at the fenced saturation rate (wrk, as the rows), on every store: the
 * Redis process after all its rows above, the embedded and Postgres stores on fresh processes
 * after a warm-up. The gateway's RSS is sampled every 5 s (ctx.r.soaks).
 */
import { join } from 'node:path';
import { acquireTokens, dropSchema, fencegate, PG_URL, rssKiB, run, SOAK, stop, WARMUP } from '../core.mjs';

export default {
  name: 'soak',
  groups: ['soak'],
  async run(ctx) {
    const soaks = ctx.r.soaks;
    const soak = async (store, gw, gwTokens) => {
      ctx.say(`resident memory over ${SOAK} s, fenced, ${store} …`);
      const samples = [];
      const sampler = setInterval(() => void rssKiB(gw.child.pid).then((k) => samples.push(k)), 5000);
      const result = await run(gw.data, { tokens: gwTokens, seconds: SOAK });
      clearInterval(sampler);
      soaks.push({ store, samples, result });
    };
    const fresh = async (store, gw, cleanup) => {
      try {
        const gwTokens = await acquireTokens(gw.control, 'order');
        await run(gw.data, { tokens: gwTokens, seconds: WARMUP });
        await soak(store, gw, gwTokens);
      } finally {
        await stop(gw.child);
        await cleanup?.();
      }
    };
    await soak('redis (AOF always)', ctx.redis, ctx.tokens);
    await fresh('embedded', await fencegate(join(ctx.tmp, 'embedded-soak'), ctx.policyDir));
    const soakSchema = `${ctx.schema}_soak`;
    await fresh('postgres', await fencegate(PG_URL, ctx.policyDir, ['--store-namespace', soakSchema]), () =>
      dropSchema(soakSchema),
    );
    return [];
  },
};
