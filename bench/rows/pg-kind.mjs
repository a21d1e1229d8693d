/**
 * `kind: postgres` row writes (lock store: the same durable Redis) against a raw node-postgres
 * UPDATE loop (bench/postgres-kind.mjs). Runs after the shared gateways have stopped.
 */
import { benchPostgresKind } from '../postgres-kind.mjs';
import { wrk } from '../wrk.mjs';
import { CONNECTIONS, fencegate, LOCKS, PG_URL, SECONDS, stop, WRK_THREADS } from '../core.mjs';

export default {
  name: 'pgkind',
  groups: ['pgkind'],
  async run(ctx) {
    ctx.r.pgKind = await benchPostgresKind({
      tmp: ctx.tmp,
      store: `redis://127.0.0.1:${ctx.redisPort}`,
      fencegate,
      stop,
      seconds: SECONDS,
      connections: CONNECTIONS,
      pgUrl: PG_URL,
      locks: LOCKS,
      say: ctx.say,
      run: (url, opts) => wrk(url, { connections: CONNECTIONS, threads: WRK_THREADS, locks: LOCKS, ...opts }),
    });
    return [];
  },
};
