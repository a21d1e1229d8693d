/**
 * The runtime of one postgres upstream: one pg Pool, the column catalog of each table
 * (catalog.ts), the fence table (created on first use), and the row operations. A fenced
 * write is one statement, so one transaction (rows-sql.ts fencedWrite): compare-and-set
 * the lock's fence row (which stays locked until commit), and only if it was raised
 * write the row; a stale token writes nothing. So the check is atomic with the write and
 * holds with any number of gateway processes. (One round trip: a BEGIN/compare-and-set/
 * write/COMMIT sequence measured at a fifth of a raw UPDATE loop's rate.)
 */
import { createRequire } from 'node:module';
import type pg from 'pg';
import { pgConnection } from '../../../store/sql/pg-ssl.js';
import { ProblemError } from '../../../errors.js';
import { quoteIdent } from '../../../store/sql/driver.js';
import { formatToken, type FencingToken } from '../../../tokens.js';
import { canonicalOf } from './canonical.js';
import { TableCatalog, type TableColumns } from './catalog.js';
import { rowJson } from './codec.js';
import type { Column, ColumnRow } from './column.js';
import type { BodyValue } from './json-body.js';
import { classifyDbError, tableMismatch } from './refusals.js';
import { checkListQuery, checkRow, urlInput, type Checked, type TypeRefusal } from './row-input.js';
import * as sql from './rows-sql.js';
import type { TableShape } from './rows-sql.js';
import { SchemaChanged, StatementRunner } from './runner.js';
import { ValueJudge } from './judge.js';
import { CONNECT_TIMEOUT_MS, sessionMode } from './session.js';
import type { PostgresRouteSettings, PostgresUpstreamSettings } from './settings.js';
import { statementsFor, type Statements } from './statements.js';
import { StatementNames } from './prepared.js';

export interface Fence {
  lock: string;
  token: FencingToken;
}

export type RowOp =
  | { op: 'get'; key: string }
  | { op: 'list'; query: string }
  | { op: 'put'; key: string; body: ReadonlyMap<string, BodyValue>; fence: Fence | null }
  | { op: 'patch'; key: string; body: ReadonlyMap<string, BodyValue>; fence: Fence | null }
  | { op: 'delete'; key: string; fence: Fence | null };

export type RowOutcome =
  /** `json`: the answer's body; `next`: the query of the list's next page, when there may be one. */
  | { ok: true; status: 200; json: string; next?: string }
  | { ok: true; status: 204 }
  | { ok: false; problem: ProblemError };

/** An outcome, or a refusal to confirm against the catalog before it is answered. */
type Attempt = RowOutcome | TypeRefusal;

export interface RowsLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** Tries of one request when the table's columns changed under it. */
const ATTEMPTS = 3;

// pg is loaded with the first postgres upstream, not with the gateway: most gateways have
// none, and the module holds ~2.7 MiB of heap (docs/gateway.md, "Performance").
const requireModule = createRequire(import.meta.url);
let pgModule: typeof pg | null = null;
const loadPg = (): typeof pg => (pgModule ??= requireModule('pg') as typeof pg);

export class PostgresRows {
  private readonly pool: pg.Pool;
  private readonly q: Statements;
  private readonly catalog: TableCatalog;
  private readonly runner: StatementRunner;
  /** Values only Postgres can judge (judge.ts). */
  private readonly judge: ValueJudge;
  /** The fence table's creation: in flight, or done (true). */
  private fenceReady: Promise<void> | true | null = null;
  /** The quoted fence table, `"<fenceSchema>".fences`. */
  private readonly fenceTable: string;
  /** The row statements' names: each connection parses and plans one once (prepared.ts). */
  private readonly names: StatementNames;

  constructor(
    readonly name: string,
    readonly settings: PostgresUpstreamSettings,
    private readonly log: RowsLog,
  ) {
    this.q = statementsFor(settings.fenceSchema);
    this.fenceTable = `${quoteIdent(settings.fenceSchema)}.fences`;
    this.names = new StatementNames(settings.preparedStatements);
    const mode = sessionMode(settings.pooler, settings.statementTimeoutMs);
    this.pool = new (loadPg().Pool)({
      // The connection string without sslmode & co., and the `ssl` they mean (pg-ssl.ts).
      ...pgConnection(settings.connectionString),
      ...mode.connection,
      max: settings.poolSize,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    });
    // An idle client's connection failing is reported here; the next use reconnects.
    this.pool.on('error', (err) =>
      this.log.warn({ err, upstream: name }, 'postgres upstream: idle connection lost'),
    );
    this.runner = new StatementRunner(this.pool, mode, this.names);
    this.judge = new ValueJudge(this.runner);
    this.catalog = new TableCatalog(async (qualified) =>
      (await this.runner.run({ text: this.q.table_columns, values: [qualified], writes: false })).map(
        columnRow,
      ),
    );
  }

  async execute(route: PostgresRouteSettings, op: RowOp): Promise<RowOutcome> {
    const qualified = sql.qualifiedName(route.table);
    for (let attempt = 1; ; attempt++) {
      const since = this.catalog.now();
      let cols: TableColumns | null = null;
      let out: Attempt;
      try {
        const known = this.catalog.columns(qualified);
        cols = known instanceof Promise ? await known : known;
        const shape = this.shape(route, qualified, cols);
        out = shape.ok ? await this.run(shape.value, op) : shape;
      } catch (err) {
        out = err instanceof SchemaChanged ? changing(this.name) : this.failed(err, qualified);
      }
      if (out.ok || !('byType' in out)) return out;
      // Refused for the column types: answered once the catalog confirms them.
      try {
        if (cols === null || attempt >= ATTEMPTS || !(await this.catalog.changed(qualified, cols, since)))
          return { ok: false, problem: out.problem };
      } catch (err) {
        return { ok: false, problem: this.failed(err, qualified).problem };
      }
    }
  }

  /** A database error as the client's answer (a bug is thrown); type-dependent ones are confirmed first. */
  private failed(err: unknown, table: string): { ok: false; problem: ProblemError; byType?: true } {
    const c = classifyDbError(err, this.name);
    if (c.kind === 'bug') throw err;
    if (c.kind === 'misconfigured') {
      this.log.error({ err, upstream: this.name, table }, `postgres upstream: ${c.log}`);
      return { ok: false, problem: c.problem, byType: true };
    }
    if (c.kind === 'unavailable')
      this.log.warn(
        { err, upstream: this.name, where: this.settings.where },
        'postgres upstream unavailable',
      );
    return { ok: false, problem: c.problem };
  }

  private async run(shape: TableShape, op: RowOp): Promise<Attempt> {
    if (op.op === 'list') return this.list(shape, op.query);
    const judged = this.judge.urlValues([urlInput(shape.key, shape.key.name, op.key)]);
    const key = judged instanceof Promise ? await judged : judged;
    if (!key.ok) return key;
    const keyText = key.value[0] as string;
    const columns = sql.rowColumns(shape);
    if (op.op === 'get') {
      const got = await this.judge.rows(
        { text: sql.getRow(shape), values: [keyText], writes: false, generation: shape.generation, columns },
        [[shape.key, keyText]],
      );
      if (!got.ok) return got;
      const row = got.value[0];
      return row === undefined ? notFound(op.key) : { ok: true, status: 200, json: rowJson(columns, row) };
    }
    const fence = op.fence;
    const guarded = fence !== null;
    let text: string;
    let params: [Column, string | null][];
    if (op.op === 'delete') {
      text = sql.deleteRow(shape, guarded);
      params = [[shape.key, keyText]];
    } else {
      const row = checkRow(shape, op.body, keyText);
      if (!row.ok) return row;
      const { given } = row.value;
      text = op.op === 'put' ? sql.putRow(shape, given, guarded) : sql.patchRow(shape, given, guarded);
      params = [
        [shape.key, keyText],
        ...given.map((c, i): [Column, string | null] => [c, row.value.params[i] ?? null]),
      ];
    }
    const values = params.map(([, v]) => v);
    let written: (string | null)[] | undefined;
    const st = { text, values, writes: true, generation: shape.generation, columns };
    if (fence === null) {
      const done = await this.judge.rows(st, params);
      if (!done.ok) return done;
      written = done.value[0];
    } else {
      const ready = this.ensureFenceTable();
      if (ready !== true) await ready;
      const token = formatToken(fence.token);
      const fenced = { ...st, text: sql.fencedWrite(this.fenceTable, text, values.length), offset: 1 };
      const done = await this.judge.rows({ ...fenced, values: [...values, fence.lock, token] }, params);
      if (!done.ok) return done;
      const answer = done.value[0] ?? [];
      if (answer[0] !== '1') return this.stale(fence.lock, token);
      written = answer[1] === null ? undefined : answer.slice(1);
    }
    if (written === undefined) return notFound(op.key);
    return op.op === 'delete'
      ? { ok: true, status: 204 }
      : { ok: true, status: 200, json: rowJson(columns, written) };
  }

  private async list(shape: TableShape, query: string): Promise<Attempt> {
    const q = checkListQuery(shape, query);
    if (!q.ok) return q;
    const { filters, after, limit, rest } = q.value;
    const inputs = after === null ? filters : [...filters, after];
    const judged = this.judge.urlValues(inputs);
    const texts = judged instanceof Promise ? await judged : judged;
    if (!texts.ok) return texts;
    const columns = sql.rowColumns(shape);
    const got = await this.judge.rows(
      {
        text: sql.listRows(
          shape,
          filters.map((f) => f.col),
          after !== null,
        ),
        // One more than asked: whether there is a next page.
        values: [String(limit + 1), ...texts.value],
        writes: false,
        generation: shape.generation,
        columns,
      },
      inputs.map((u, i) => [u.col, texts.value[i] ?? null]),
    );
    if (!got.ok) return got;
    const page = got.value.slice(0, limit);
    const json = `[${page.map((r) => rowJson(columns, r)).join(',')}]`;
    const last = page[page.length - 1]?.[0];
    if (got.value.length <= limit || last === null || last === undefined)
      return { ok: true, status: 200, json };
    const next = new URLSearchParams([...rest, ['after', canonicalOf(shape.key, last)]]).toString();
    return { ok: true, status: 200, json, next };
  }

  /** The 409 for a token below the lock's fence, with the fence as it is now. */
  private async stale(lock: string, token: string): Promise<RowOutcome> {
    const rows = await this.runner.run({ text: this.q.fence_highest, values: [lock], writes: false });
    const highest = rows[0]?.[0] ?? undefined;
    return {
      ok: false,
      problem: new ProblemError('stale-token', `token ${token} is below the highest written for this lock`, {
        lock,
        token,
        highest,
      }),
    };
  }

  /** How many row statements have a name (prepared once per connection); for tests. */
  get namedStatements(): number {
    return this.names.size;
  }

  /** The route's key and columns in the table; a missing one (or a key that has no one spelling) is the config's fault. */
  private shape(
    route: PostgresRouteSettings,
    qualified: string,
    cols: TableColumns,
  ): Checked<TableShape> | TypeRefusal {
    const { byName } = cols;
    const missing = [route.key, ...route.columns].filter((c) => !byName.has(c));
    const key = byName.get(route.key);
    let fault: string | null = null;
    if (byName.size === 0) fault = `table ${qualified} not found`;
    else if (missing.length > 0) fault = `columns ${missing.join(', ')} not in ${qualified}`;
    else if (key?.category === 'json') fault = `key ${route.key} is ${key.declared}, which has no equality`;
    else if (key?.deterministic === false)
      fault = `key ${route.key} has a nondeterministic collation: one row would have many spellings, and locks`;
    if (fault !== null || key === undefined) {
      this.log.error({ upstream: this.name, table: qualified, missing }, `postgres upstream: ${fault}`);
      return { ok: false, problem: tableMismatch(this.name), byType: true };
    }
    const col = (n: string): Column => byName.get(n) as Column;
    return {
      ok: true,
      value: { qualified, key, columns: route.columns.map(col), generation: cols.generation },
    };
  }

  /** Creates the fence schema and table once (under an advisory lock: gateways start together). */
  private ensureFenceTable(): Promise<void> | true {
    this.fenceReady ??= (async () => {
      const table = `${this.settings.fenceSchema.replace(/"/g, '""')}`;
      const present = await this.runner.run({
        text: this.q.fence_table,
        values: [`"${table}".fences`],
        writes: false,
      });
      if (present[0]?.[0] !== 't')
        await this.runner.transaction(async (client) => {
          await client.query(this.q.fence_ddl_lock, [this.settings.fenceSchema]);
          await client.query(this.q.fence_ddl);
        });
      this.fenceReady = true;
    })().catch((err: unknown) => {
      this.fenceReady = null;
      throw err;
    });
    return this.fenceReady;
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

/** A row of `table_columns`, as text, typed. */
function columnRow(r: (string | null)[]): ColumnRow {
  return {
    name: r[0] as string,
    oid: Number(r[1]),
    typmod: Number(r[2]),
    base_type: r[3] as string,
    base_kind: r[4] as string,
    base_sql: r[5] as string,
    declared: r[6] as string,
    deterministic: r[7] === 't',
  };
}

function changing(upstream: string): TypeRefusal {
  return {
    ok: false,
    problem: new ProblemError(
      'upstream-unavailable',
      'the table changed under the request; try again',
      { upstream },
      {
        headers: { 'retry-after': '1' },
      },
    ),
    byType: true,
  };
}

function notFound(key: string): RowOutcome {
  return {
    ok: false,
    problem: new ProblemError('row-not-found', `no row has the key ${JSON.stringify(key)}`),
  };
}
