/**
 * Compiling the policy fields of the postgres kind: the upstream (`url`, with
 * `${ENV}` references expanded; `fenceSchema`) and a route's `table`, `key` and
 * `columns`. Pure functions returning results: the policy compiler turns a failure
 * into a PolicyError pointing at the field.
 */
import { TlsFileError } from '../../../http/tls.js';
import { pgConnection } from '../../../store/sql/pg-ssl.js';
import { STATEMENT_TIMEOUT_MS, type Pooler } from './session.js';

/** A field of the upstream or the route, and what is wrong with it. */
export interface SettingsError {
  field: string;
  message: string;
}

export type Compiled<T> = { ok: true; value: T } | { ok: false; errors: SettingsError[] };

export interface RawPostgresUpstream {
  url: string;
  /** `transaction`: a transaction pooler (PgBouncer) sits in front of the database (session.ts). */
  pooler?: Pooler;
  /** Schema holding `fences` in the target database; default `fencegate`. */
  fenceSchema?: string;
  /** Prepare each statement once per connection; default true, false with `pooler: transaction` (prepared.ts). */
  preparedStatements?: boolean;
  /** Connections to the database, at most; default DEFAULT_POOL_SIZE. */
  poolSize?: number;
  /** The upstream's `timeoutMs`: a statement's timeout; default STATEMENT_TIMEOUT_MS. */
  timeoutMs?: number;
}

export interface PostgresUpstreamSettings {
  /** The connection string with `${ENV}` expanded: may hold a password, never log it. */
  readonly connectionString: string;
  /** postgres://host:port/db, for messages and logs (no credentials). */
  readonly where: string;
  readonly fenceSchema: string;
  /** How session settings are made: at connection start, or inside each transaction (session.ts). */
  readonly pooler: Pooler;
  /** Statements are named, so each connection parses and plans them once (prepared.ts). */
  readonly preparedStatements: boolean;
  /** Connections to the database, at most. */
  readonly poolSize: number;
  /** A statement running longer is cancelled by Postgres (504 upstream-timeout). */
  readonly statementTimeoutMs: number;
}

export interface RawPostgresRoute {
  table?: string;
  key?: string;
  columns?: string[];
}

export interface TableName {
  /** Null: resolved through the connection's search_path. */
  readonly schema: string | null;
  readonly name: string;
}

export interface PostgresRouteSettings {
  readonly table: TableName;
  readonly key: string;
  /** What a write may set, and what a read returns besides the key. */
  readonly columns: readonly string[];
  /** 'row' when the path has the key parameter; 'list' when it has no parameter. */
  readonly shape: 'row' | 'list';
}

export const DEFAULT_FENCE_SCHEMA = 'fencegate';
/**
 * node-postgres's own default. Writes under one lock wait for each other inside the
 * database anyway; more connections than the database has cores to run them mostly add
 * lock waits and wake-ups (docs/postgres.md, "Performance").
 */
export const DEFAULT_POOL_SIZE = 10;

/** Methods a route of each shape may serve. */
export const ROW_METHODS = ['GET', 'PUT', 'PATCH', 'DELETE'] as const;
export const LIST_METHODS = ['GET'] as const;

/** `raw.url` arrives with its ${ENV} references expanded (src/policy/env.ts, by the policy compiler). */
export function compilePostgresUpstream(raw: RawPostgresUpstream): Compiled<PostgresUpstreamSettings> {
  const errors: SettingsError[] = [];
  const fenceSchema = raw.fenceSchema ?? DEFAULT_FENCE_SCHEMA;
  const schemaProblem = identifierProblem(fenceSchema);
  if (schemaProblem !== null) errors.push({ field: 'fenceSchema', message: schemaProblem });
  else if (fenceSchema.toLowerCase().startsWith('pg_'))
    errors.push({ field: 'fenceSchema', message: 'must not start with "pg_"' });

  let url: URL;
  try {
    url = new URL(raw.url);
  } catch {
    // Never echo the expanded URL: it may carry a password from the environment.
    errors.push({ field: 'url', message: 'is not a valid URL (after ${ENV} expansion)' });
    return { ok: false, errors };
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    errors.push({ field: 'url', message: 'must be a postgres:// or postgresql:// URL' });
  } else if (url.hostname === '') {
    errors.push({ field: 'url', message: 'must name a host' });
  } else if (url.pathname.length <= 1) {
    errors.push({ field: 'url', message: 'must name a database (postgres://host:5432/db)' });
  }
  if (url.hash !== '') errors.push({ field: 'url', message: 'must not contain a fragment' });
  if (errors.length > 0) return { ok: false, errors };
  // sslmode, sslrootcert, sslcert, sslkey: checked (files read) now, so a bad one is a policy error.
  try {
    pgConnection(raw.url);
  } catch (err) {
    if (err instanceof RangeError || err instanceof TlsFileError)
      return { ok: false, errors: [{ field: 'url', message: err.message }] };
    throw err;
  }
  const where = `postgres://${url.hostname}${url.port ? `:${url.port}` : ''}${url.pathname}`;
  // `preparedStatements: false` alone was (and is) how a transaction pooler is declared.
  const pooler = raw.pooler ?? (raw.preparedStatements === false ? 'transaction' : 'none');
  // PgBouncer keeps prepared statements across its server sessions only from 1.21 on, and
  // only when configured to (max_prepared_statements): say so with preparedStatements: true.
  const preparedStatements = raw.preparedStatements ?? pooler === 'none';
  const poolSize = raw.poolSize ?? DEFAULT_POOL_SIZE;
  return {
    ok: true,
    value: {
      connectionString: raw.url,
      where,
      fenceSchema,
      pooler,
      preparedStatements,
      poolSize,
      statementTimeoutMs: raw.timeoutMs ?? STATEMENT_TIMEOUT_MS,
    },
  };
}

/**
 * Checks a route's postgres fields against its path parameters and methods. The key
 * is served by a path parameter of the same name (a 'row' route); a path without
 * parameters is a 'list' route (GET only).
 */
export function compilePostgresRoute(
  raw: RawPostgresRoute,
  pathParams: readonly string[],
  methods: readonly string[],
): Compiled<PostgresRouteSettings> {
  const errors: SettingsError[] = [];
  const fail = (field: string, message: string): void => void errors.push({ field, message });

  let table: TableName | null = null;
  if (raw.table === undefined) fail('table', 'a route of a postgres upstream needs "table"');
  else {
    const parsed = parseTableName(raw.table);
    if (typeof parsed === 'string') fail('table', parsed);
    else table = parsed;
  }

  const key = raw.key;
  if (key === undefined) fail('key', 'a route of a postgres upstream needs "key" (the key column)');
  else {
    const p = identifierProblem(key);
    if (p !== null) fail('key', p);
  }

  const columns = raw.columns ?? [];
  if (raw.columns === undefined) fail('columns', 'a route of a postgres upstream needs "columns"');
  columns.forEach((c, i) => {
    const p = identifierProblem(c);
    if (p !== null) fail(`columns[${i}]`, p);
    else if (c === key)
      fail(`columns[${i}]`, `is the key column; the key is always returned and set by path`);
    else if (columns.indexOf(c) !== i) fail(`columns[${i}]`, `"${c}" is listed twice`);
  });

  let shape: 'row' | 'list' = 'row';
  if (key !== undefined) {
    if (pathParams.includes(key)) shape = 'row';
    else if (pathParams.length === 0) shape = 'list';
    else
      fail(
        'path',
        `has parameters (${pathParams.map((p) => `:${p}`).join(', ')}) but none named ":${key}" for the key column`,
      );
    if (pathParams.length > 1 && pathParams.includes(key))
      fail('path', `must have only the key parameter ":${key}"`);
  }
  const allowed: readonly string[] = shape === 'row' ? ROW_METHODS : LIST_METHODS;
  for (const m of methods) {
    if (!allowed.includes(m))
      fail(
        'methods',
        shape === 'row'
          ? `${m} is not served on rows (use ${ROW_METHODS.join(', ')})`
          : `${m} is not served on a list route (a path without ":${key ?? 'key'}" serves GET only)`,
      );
  }

  if (errors.length > 0 || table === null || key === undefined) return { ok: false, errors };
  return { ok: true, value: { table, key, columns: [...columns], shape } };
}

/** `orders` or `sales.orders`; each part a plain identifier, taken as written (quoted in SQL). */
export function parseTableName(text: string): TableName | string {
  const parts = text.split('.');
  if (parts.length > 2) return 'must be "table" or "schema.table"';
  for (const p of parts) {
    const problem = identifierProblem(p);
    if (problem !== null) return `"${p}" ${problem}`;
  }
  return parts.length === 2
    ? { schema: parts[0] as string, name: parts[1] as string }
    : { schema: null, name: parts[0] as string };
}

/**
 * Identifiers are quoted in every statement, so any characters would be safe; we still
 * keep them to what a column name in a policy plausibly is, and within Postgres' 63 bytes.
 */
const IDENT = /^[A-Za-z_][A-Za-z0-9_$]*$/;

export function identifierProblem(name: string): string | null {
  if (!IDENT.test(name))
    return 'must be an identifier (letters, digits, "_", "$"; not starting with a digit)';
  if (Buffer.byteLength(name, 'utf8') > 63)
    return 'must be at most 63 bytes (Postgres truncates longer names)';
  return null;
}
