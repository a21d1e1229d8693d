/** Fenced writes on the Postgres store, in a throwaway schema (ctx.schema) on the shared server. */
import { acquireTokens, dropSchema, fencegate, PG_URL, run, stop, summarize, WARMUP } from '../core.mjs';

export default {
  name: 'postgres',
  groups: ['postgres'],
  async run(ctx) {
    const postgres = await fencegate(PG_URL, ctx.policyDir, ['--store-namespace', ctx.schema]);
    ctx.say(`fencegate fenced, postgres …`);
    const tokens = await acquireTokens(postgres.control, 'order');
    await run(postgres.data, { tokens, seconds: WARMUP });
    ctx.r.postgresResult = await ctx.withRss(
      summarize(
        'fencegate fenced, postgres store',
        await ctx.cpuOf(postgres.child.pid, null, { run: () => run(postgres.data, { tokens }) }),
      ),
      postgres.child.pid,
    );
    await stop(postgres.child);
    await dropSchema(ctx.schema);
    return [ctx.r.postgresResult];
  },
};
