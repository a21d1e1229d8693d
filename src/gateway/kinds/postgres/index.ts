/**
 * `kind: postgres`: rows of a Postgres table (docs/postgres.md). The gateway executes
 * each request as SQL itself; the fence is checked inside the target database, in the
 * same transaction as the row write (`fenceAt: 'resource'`), so there is no drain
 * barrier and the promise holds with any number of gateway processes.
 */
import { ProblemError } from '../../../errors.js';
import type { CompiledPolicy, CompiledRoute } from '../../../policy/model.js';
import { renderLock } from '../../../policy/template.js';
import { sendContinue } from '../../../http/continue.js';
import type { GatewayRequestState } from '../../context.js';
import type { Exchange } from '../../exchange.js';
import { headerLookup } from '../../headers.js';
import type { DownstreamKind, KindEnvironment, KindRuntime, ResourceFence, WriteSet } from '../types.js';
import { readJsonBody } from './body.js';
import { PostgresRows, type RowOp } from './rows.js';
import {
  compilePostgresRoute,
  compilePostgresUpstream,
  type PostgresRouteSettings,
  type PostgresUpstreamSettings,
  type RawPostgresRoute,
  type RawPostgresUpstream,
  type SettingsError,
} from './settings.js';
import { DEFAULTS } from '../../../policy/model.js';

/** `columns[2]` → ['columns', 2], so policy errors point at the element. */
const fieldErrors = (errors: SettingsError[]) =>
  errors.map((e) => {
    const m = /^([A-Za-z]+)\[([0-9]+)\]$/.exec(e.field);
    return { field: m ? [m[1] as string, Number(m[2])] : [e.field], message: e.message };
  });

function upstreamSettings(route: CompiledRoute): PostgresUpstreamSettings {
  return route.upstream.settings.postgres as PostgresUpstreamSettings;
}

function routeSettings(route: CompiledRoute): PostgresRouteSettings {
  return route.target.postgres as PostgresRouteSettings;
}

export const postgresKind: DownstreamKind = {
  name: 'postgres',
  fenceAt: 'resource',
  upstreamFields: {
    /** `transaction` behind a transaction pooler such as PgBouncer. */
    pooler: { enum: ['none', 'transaction'] },
    /** The schema of the fence table in the target database. */
    fenceSchema: { type: 'string', minLength: 1 },
    /** Prepare each statement once per connection (default true; false with a pooler). */
    preparedStatements: { type: 'boolean' },
    /** Connections to the database, at most (default 10). */
    poolSize: { type: 'integer', minimum: 1, maximum: 1_000 },
  },
  routeFields: {
    /** The table, its key column, and the columns a write may set. */
    table: { type: 'string', minLength: 1 },
    key: { type: 'string', minLength: 1 },
    columns: { type: 'array', uniqueItems: true, items: { type: 'string', minLength: 1 } },
  },
  compileUpstream(name, raw) {
    // Shaped by upstreamFields (the policy schema checked them).
    const own = raw as Partial<RawPostgresUpstream>;
    const r = compilePostgresUpstream({
      url: raw.url,
      pooler: own.pooler,
      fenceSchema: own.fenceSchema,
      preparedStatements: own.preparedStatements,
      poolSize: own.poolSize,
      timeoutMs: raw.timeoutMs,
    });
    if (!r.ok) return { ok: false, errors: fieldErrors(r.errors) };
    return {
      ok: true,
      upstream: {
        name,
        kind: 'postgres',
        url: r.value.where,
        origin: '',
        basePath: '',
        timeoutMs: r.value.statementTimeoutMs,
        breaker: { ...DEFAULTS.breaker, ...raw.breaker },
        settings: { postgres: r.value },
      },
    };
  },
  compileRoute(raw, _upstream, path) {
    if (path.wildcard)
      return { ok: false, errors: [{ field: ['path'], message: 'must not end in "*" on a postgres route' }] };
    // Shaped by routeFields (the policy schema checked them).
    const own = raw as RawPostgresRoute;
    const r = compilePostgresRoute(
      { table: own.table, key: own.key, columns: own.columns },
      path.params,
      raw.methods,
    );
    return r.ok ? { ok: true, target: { postgres: r.value } } : { ok: false, errors: fieldErrors(r.errors) };
  },
  writes(route, req): WriteSet {
    if (route.lock === null || req.method === 'GET' || req.method === 'HEAD') return { kind: 'read' };
    const rendered = renderLock(route.lock, req.params, headerLookup(req.rawHeaders));
    if (!rendered.ok) {
      const detail = `cannot derive the lock for route "${route.name}": ${rendered.reason}`;
      return { kind: 'refuse', problem: new ProblemError('invalid-key', detail) };
    }
    return { kind: 'write', locks: [rendered.key] };
  },
  open: (env) => new PostgresRuntime(env),
};

class PostgresRuntime implements KindRuntime {
  /** One pool per upstream name, replaced when its settings change. */
  private readonly upstreams = new Map<string, { settings: PostgresUpstreamSettings; rows: PostgresRows }>();

  constructor(private readonly env: KindEnvironment) {}

  private rowsFor(route: CompiledRoute): PostgresRows {
    const settings = upstreamSettings(route);
    const name = route.upstream.name;
    const have = this.upstreams.get(name);
    if (have !== undefined && sameSettings(have.settings, settings)) return have.rows;
    if (have !== undefined) void have.rows.close().catch(() => undefined);
    const rows = new PostgresRows(name, settings, this.env.log);
    this.upstreams.set(name, { settings, rows });
    return rows;
  }

  async serve(ex: Exchange, state: GatewayRequestState, fences: readonly ResourceFence[]): Promise<void> {
    const route = state.match.route;
    const target = routeSettings(route);
    if (fences.length > 1) throw new Error('a postgres route writes one lock');
    const fence = fences[0] ?? null;
    const writing = ex.method !== 'GET' && ex.method !== 'HEAD';
    // Never write unfenced on an enforcing fenced route, whatever happened upstream of here.
    if (writing && fence === null && route.lock !== null && route.fencing?.enforce === true) {
      throw new Error(`route "${route.name}": an enforced write reached the postgres kind without its fence`);
    }
    const key = state.match.params[target.key] ?? '';
    let op: RowOp;
    switch (ex.method) {
      case 'GET':
        op = target.shape === 'list' ? { op: 'list', query: queryOf(ex.req.url ?? '/') } : { op: 'get', key };
        break;
      case 'DELETE':
        op = { op: 'delete', key, fence };
        break;
      case 'PUT':
      case 'PATCH': {
        sendContinue(ex.req, ex.res);
        const { upload } = state.match.route;
        const body = await readJsonBody(ex.req, ex.headers['content-length'], {
          idleMs: upload.idleTimeoutMs,
          totalMs: upload.timeoutMs,
        });
        if (!body.ok) {
          if (!ex.req.complete) ex.header('connection', 'close');
          ex.answerProblem(body.problem);
          return;
        }
        op = { op: ex.method === 'PUT' ? 'put' : 'patch', key, body: body.value, fence };
        break;
      }
      default:
        ex.answerProblem(new ProblemError('method-not-allowed', `${ex.method} is not served on rows`));
        return;
    }
    const out = await this.rowsFor(route).execute(target, op);
    if (!out.ok && out.problem.code === 'stale-token' && fence !== null) {
      // The fence is kept in the database: the gateway learns of a stale token here.
      const highest = out.problem.extra.highest;
      this.env.refused(
        ex,
        state,
        {
          reason: 'stale',
          lock: fence.lock,
          token: fence.token,
          highest: typeof highest === 'string' ? highest : null,
        },
        true,
      );
    }
    if (!out.ok) ex.answerProblem(out.problem);
    else if (out.status === 204) ex.answer(204, null, null);
    else {
      // The list's next page (RFC 8288): the body stays the JSON array of rows it always was.
      if (out.next !== undefined) ex.header('link', `<${pathOf(ex.req.url ?? '/')}?${out.next}>; rel="next"`);
      ex.answer(200, 'application/json', out.json);
    }
  }

  retain(policy: CompiledPolicy): void {
    for (const [name, have] of this.upstreams) {
      const now = Object.hasOwn(policy.upstreams, name) ? policy.upstreams[name] : undefined;
      const settings =
        now?.kind === 'postgres' ? (now.settings.postgres as PostgresUpstreamSettings) : undefined;
      if (settings === undefined || !sameSettings(settings, have.settings)) {
        this.upstreams.delete(name);
        void have.rows.close().catch(() => undefined);
      }
    }
  }

  async close(): Promise<void> {
    const all = [...this.upstreams.values()];
    this.upstreams.clear();
    await Promise.all(all.map((u) => u.rows.close()));
  }
}

function sameSettings(a: PostgresUpstreamSettings, b: PostgresUpstreamSettings): boolean {
  return (
    a.connectionString === b.connectionString &&
    a.fenceSchema === b.fenceSchema &&
    a.pooler === b.pooler &&
    a.statementTimeoutMs === b.statementTimeoutMs &&
    a.preparedStatements === b.preparedStatements &&
    a.poolSize === b.poolSize
  );
}

function queryOf(url: string): string {
  const i = url.indexOf('?');
  return i < 0 ? '' : url.slice(i + 1);
}

function pathOf(url: string): string {
  const i = url.indexOf('?');
  return i < 0 ? url : url.slice(0, i);
}
