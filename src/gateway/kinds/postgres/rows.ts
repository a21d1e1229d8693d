/**
 * The runtime of one postgres upstream: one pg Pool, the column catalog of each table
 * (read once, dropped on any error touching the table), the fence table (created on
 * first use), and the row operations. A fenced write is one statement, so one
 * transaction (rows-sql.ts fencedWrite): compare-and-set the lock's fence row (which
 * stays locked until commit), and only if it was raised write the row; a stale token
 * writes nothing. So the check is atomic with the write and holds with any number of
 * gateway processes. (One round trip: a BEGIN/compare-and-set/write/COMMIT sequence
 * measured at a fifth of a raw UPDATE loop's rate.)
 */
import { createRequire } from 'node:module';
import type pg from 'pg';
import { pgConnection } from '../../../store/sql/pg-ssl.js';
import { ProblemError } from '../../../errors.js';
import { quoteIdent, withRetries } from '../../../store/sql/driver.js';
import { formatToken, type FencingToken } from '../../../tokens.js';
import { categoryOf, decode, type Column } from './codec.js';
import { classifyDbError } from './refusals.js';
import { checkKey, checkListQuery, checkRow, type Checked } from './row-input.js';
import * as sql from './rows-sql.js';
import type { TableShape } from './rows-sql.js';
import type { PostgresRouteSettings, PostgresUpstreamSettings } from './settings.js';
import { statementsFor, type ColumnRow, type HighestRow, type Statements } from './statements.js';
import { ownRecord } from '../../../own-record.js';
import { StatementNames } from './prepared.js';

const CONNECT_TIMEOUT_MS = 2000;
const STATEMENT_TIMEOUT_MS = 5000;
const QUERY_TIMEOUT_MS = 7000;
const IDLE_IN_TX_TIMEOUT_MS = 10_000;

export interface Fence {
  lock: string;
  token: FencingToken;
}

export type RowOp =
  | { op: 'get'; key: string }
  | { op: 'list'; query: string }
  | { op: 'put'; key: string; body: unknown; fence: Fence | null }
  | { op: 'patch'; key: string; body: unknown; fence: Fence | null }
  | { op: 'delete'; key: string; fence: Fence | null };

export type RowOutcome =
  { ok: true; status: 200; body: unknown } | { ok: true; status: 204 } | { ok: false; problem: ProblemError };

export interface RowsLog {
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

// pg is loaded with the first postgres upstream, not with the gateway: most gateways have
// none, and the module holds ~2.7 MiB of heap (docs/gateway.md, "Performance").
const requireModule = createRequire(import.meta.url);
let pgModule: typeof pg | null = null;
const loadPg = (): typeof pg => (pgModule ??= requireModule('pg') as typeof pg);

export class PostgresRows {
  private readonly pool: pg.Pool;
  private readonly q: Statements;
  private readonly tables = new Map<string, Promise<ReadonlyMap<string, Column>>>();
  private fenceReady: Promise<void> | null = null;
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
    this.pool = new (loadPg().Pool)({
      // The connection string without sslmode & co., and the `ssl` they mean (pg-ssl.ts).
      ...pgConnection(settings.connectionString),
      max: settings.poolSize,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      statement_timeout: STATEMENT_TIMEOUT_MS,
      query_timeout: QUERY_TIMEOUT_MS,
      idle_in_transaction_session_timeout: IDLE_IN_TX_TIMEOUT_MS,
      application_name: 'fencegate',
      // Timestamps are printed in UTC (to_json of a timestamptz follows TimeZone).
      options: '-c TimeZone=UTC',
    });
    // An idle client's connection failing is reported here; the next use reconnects.
    this.pool.on('error', (err) =>
      this.log.warn({ err, upstream: name }, 'postgres upstream: idle connection lost'),
    );
  }

  async execute(route: PostgresRouteSettings, op: RowOp): Promise<RowOutcome> {
    const tableKey = sql.qualifiedName(route.table);
    try {
      const shape = await this.shape(route);
      if (!shape.ok) return shape;
      return await this.run(shape.value, op);
    } catch (err) {
      this.tables.delete(tableKey);
      const c = classifyDbError(err, this.name);
      if (c.kind === 'bug') throw err;
      if (c.kind === 'misconfigured')
        this.log.error(
          { err, upstream: this.name, table: tableKey },
          'postgres upstream: table does not match the policy',
        );
      else if (c.kind === 'unavailable')
        this.log.warn(
          { err, upstream: this.name, where: this.settings.where },
          'postgres upstream unavailable',
        );
      return { ok: false, problem: c.problem };
    }
  }

  private async run(shape: TableShape, op: RowOp): Promise<RowOutcome> {
    if (op.op === 'list') {
      const q = checkListQuery(shape, op.query);
      if (!q.ok) return q;
      const rows = await this.query(sql.listRows(shape, q.value.filters), [
        String(q.value.limit),
        ...q.value.params,
      ]);
      return { ok: true, status: 200, body: rows.map((r) => toJson(shape, r)) };
    }
    const key = checkKey(shape, op.key);
    if (!key.ok) return key;
    if (op.op === 'get') {
      const rows = await this.query(sql.getRow(shape), [key.value]);
      return rows[0] === undefined
        ? notFound(op.key)
        : { ok: true, status: 200, body: toJson(shape, rows[0]) };
    }
    const fence = op.fence;
    const guarded = fence !== null;
    let text: string;
    let params: (string | null)[];
    if (op.op === 'delete') {
      text = sql.deleteRow(shape, guarded);
      params = [key.value];
    } else {
      const row = checkRow(shape, op.body, key.value);
      if (!row.ok) return row;
      text =
        op.op === 'put'
          ? sql.putRow(shape, row.value.given, guarded)
          : sql.patchRow(shape, row.value.given, guarded);
      params = [key.value, ...row.value.params];
    }
    let written: unknown[] | undefined;
    if (fence === null) {
      written = (await this.query(text, params))[0];
    } else {
      await this.ensureFenceTable();
      const token = formatToken(fence.token);
      const statement = sql.fencedWrite(this.fenceTable, text, params.length);
      const answer = (await this.query(statement, [...params, fence.lock, token]))[0] ?? [];
      if (answer[0] !== 1) return this.stale(fence.lock, token);
      written = answer[1] === null ? undefined : answer.slice(1);
    }
    if (written === undefined) return notFound(op.key);
    return op.op === 'delete'
      ? { ok: true, status: 204 }
      : { ok: true, status: 200, body: toJson(shape, written) };
  }

  /** The 409 for a token below the lock's fence, with the fence as it is now. */
  private async stale(lock: string, token: string): Promise<RowOutcome> {
    const highest = (await this.pool.query<HighestRow>(this.q.fence_highest, [lock])).rows[0]?.highest;
    return {
      ok: false,
      problem: new ProblemError('stale-token', `token ${token} is below the highest written for this lock`, {
        lock,
        token,
        highest,
      }),
    };
  }

  /** One READ COMMITTED transaction, retried on serialization failure or deadlock. */
  private transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return withRetries(async () => {
      const client = await this.pool.connect();
      let broken: unknown = undefined;
      try {
        await client.query('BEGIN');
        const out = await fn(client);
        await client.query('COMMIT');
        return out;
      } catch (err) {
        try {
          await client.query('ROLLBACK');
        } catch (rollbackErr) {
          broken = rollbackErr;
        }
        throw err;
      } finally {
        client.release(broken instanceof Error ? broken : undefined);
      }
    });
  }

  private async query(text: string, values: (string | null)[]): Promise<unknown[][]> {
    const name = this.names.of(text);
    return (await this.pool.query<unknown[]>({ name, text, values, rowMode: 'array' })).rows;
  }

  /** How many row statements have a name (prepared once per connection); for tests. */
  get namedStatements(): number {
    return this.names.size;
  }

  /** The route's table shape from the (cached) catalog; a missing column is a refusal of the config. */
  private async shape(route: PostgresRouteSettings): Promise<Checked<TableShape>> {
    const qualified = sql.qualifiedName(route.table);
    let cols = this.tables.get(qualified);
    if (cols === undefined) {
      cols = this.readColumns(qualified);
      this.tables.set(qualified, cols);
    }
    const byName = await cols;
    const missing = [route.key, ...route.columns].filter((c) => !byName.has(c));
    if (byName.size === 0 || missing.length > 0) {
      this.tables.delete(qualified);
      const what =
        byName.size === 0
          ? `table ${qualified} not found`
          : `columns ${missing.join(', ')} not in ${qualified}`;
      this.log.error({ upstream: this.name, table: qualified, missing }, `postgres upstream: ${what}`);
      return {
        ok: false,
        problem: new ProblemError(
          'upstream-unavailable',
          `the table does not match the policy; see the gateway log`,
          {
            upstream: this.name,
          },
        ),
      };
    }
    const col = (n: string): Column => byName.get(n) as Column;
    return { ok: true, value: { qualified, key: col(route.key), columns: route.columns.map(col) } };
  }

  private async readColumns(qualified: string): Promise<ReadonlyMap<string, Column>> {
    const rows = (await this.pool.query<ColumnRow>(this.q.table_columns, [qualified])).rows;
    return new Map(
      rows.map((r) => [
        r.name,
        { name: r.name, sqlType: r.sql_type, baseType: r.base_type, category: categoryOf(r.base_type) },
      ]),
    );
  }

  /** Creates the fence schema and table once (under an advisory lock: gateways start together). */
  private ensureFenceTable(): Promise<void> {
    this.fenceReady ??= (async () => {
      const table = `${this.settings.fenceSchema.replace(/"/g, '""')}`;
      const present = await this.pool.query<{ present: boolean }>(this.q.fence_table, [`"${table}".fences`]);
      if (present.rows[0]?.present === true) return;
      await this.transaction(async (client) => {
        await client.query(this.q.fence_ddl_lock, [this.settings.fenceSchema]);
        await client.query(this.q.fence_ddl);
      });
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

function notFound(key: string): RowOutcome {
  return {
    ok: false,
    problem: new ProblemError('row-not-found', `no row has the key ${JSON.stringify(key)}`),
  };
}

/** A row selected as [key, ...columns] text → a JSON object (an own record: column names are user-chosen). */
function toJson(shape: TableShape, row: unknown[]): Record<string, unknown> {
  const out = ownRecord<unknown>();
  [shape.key, ...shape.columns].forEach((c, i) => {
    out[c.name] = decode(c, (row[i] ?? null) as string | null);
  });
  return out;
}
