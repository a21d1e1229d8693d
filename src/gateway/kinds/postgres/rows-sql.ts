/**
 * The row statements of one route, built from the table's catalog: identifiers come
 * from the policy and the catalog and are always quoted; values are always `$n`
 * parameters, passed as text and cast to the column's type (column.ts `cast`). Every
 * row statement returns the key and the declared columns themselves, so its result
 * reports their types (runner.ts).
 */
import { quoteIdent } from '../../../store/sql/driver.js';
import type { Column } from './column.js';
import type { TableName } from './settings.js';

export interface TableShape {
  /** The quoted, optionally schema-qualified name. */
  readonly qualified: string;
  readonly key: Column;
  /** The route's declared columns, in policy order. */
  readonly columns: readonly Column[];
  /** The catalog generation these columns come from (catalog.ts). */
  readonly generation: number;
}

export function qualifiedName(t: TableName): string {
  return t.schema === null ? quoteIdent(t.name) : `${quoteIdent(t.schema)}.${quoteIdent(t.name)}`;
}

/** Every column a row statement returns: the key, then the declared columns. */
export function rowColumns(shape: TableShape): Column[] {
  return [shape.key, ...shape.columns];
}

/** The placeholder of parameter `$n` for a value of `col` (the value passed as text). */
export function placeholder(col: Column, n: number): string {
  if (col.category === 'bytea') return `decode($${n}::text, 'base64')`;
  return `$${n}::${col.cast}`;
}

/** The key and the declared columns of `t`, each as it is. */
function selectList(shape: TableShape): string {
  return rowColumns(shape)
    .map((c) => `t.${c.ident}`)
    .join(', ');
}

/** `AND EXISTS (SELECT 1 FROM fence)` when the write is guarded by the fence CTE (fencedWrite). */
const GUARD = ' AND EXISTS (SELECT 1 FROM fence)';

/** $1 key. */
export function getRow(shape: TableShape, guard = ''): string {
  return `SELECT ${selectList(shape)} FROM ${shape.qualified} AS t WHERE t.${shape.key.ident} = ${placeholder(shape.key, 1)}${guard}`;
}

/**
 * $1 limit, then one parameter per filter, then (when `after`) the key to start after.
 * Ordered by the key: the next page starts after the last key of this one.
 */
export function listRows(shape: TableShape, filters: readonly Column[], after: boolean): string {
  const where = filters.map((c, i) => `t.${c.ident} = ${placeholder(c, i + 2)}`);
  if (after) where.push(`t.${shape.key.ident} > ${placeholder(shape.key, filters.length + 2)}`);
  return (
    `SELECT ${selectList(shape)} FROM ${shape.qualified} AS t` +
    (where.length > 0 ? ` WHERE ${where.join(' AND ')}` : '') +
    ` ORDER BY t.${shape.key.ident} LIMIT $1::integer`
  );
}

/** $1 key, then one parameter per column given. Needs a unique index on the key alone. */
export function putRow(shape: TableShape, given: readonly Column[], guarded = false): string {
  const names = [shape.key, ...given].map((c) => c.ident);
  const values = [shape.key, ...given].map((c, i) => placeholder(c, i + 1));
  const key = shape.key.ident;
  // With no column given, the update still has to name one to return the row.
  const sets =
    given.length > 0 ? given.map((c) => `${c.ident} = EXCLUDED.${c.ident}`) : [`${key} = EXCLUDED.${key}`];
  return (
    `INSERT INTO ${shape.qualified} AS t (${names.join(', ')}) ` +
    (guarded ? `SELECT ${values.join(', ')} FROM fence ` : `VALUES (${values.join(', ')}) `) +
    `ON CONFLICT (${key}) DO UPDATE SET ${sets.join(', ')} RETURNING ${selectList(shape)}`
  );
}

/** $1 key, then one parameter per column given; with none, reads the row locked. */
export function patchRow(shape: TableShape, given: readonly Column[], guarded = false): string {
  const guard = guarded ? GUARD : '';
  if (given.length === 0) return `${getRow(shape, guard)} FOR UPDATE`;
  const sets = given.map((c, i) => `${c.ident} = ${placeholder(c, i + 2)}`);
  return `UPDATE ${shape.qualified} AS t SET ${sets.join(', ')} WHERE t.${shape.key.ident} = ${placeholder(shape.key, 1)}${guard} RETURNING ${selectList(shape)}`;
}

/** $1 key. Returns the row's columns too: the result must report their types (runner.ts). */
export function deleteRow(shape: TableShape, guarded = false): string {
  return `DELETE FROM ${shape.qualified} AS t WHERE t.${shape.key.ident} = ${placeholder(shape.key, 1)}${guarded ? GUARD : ''} RETURNING ${selectList(shape)}`;
}

/**
 * A fenced write as ONE statement (one round trip, its own transaction): the `fence` CTE
 * raises the lock's fence row to the token if the token is not below it (creating the
 * row if new; the row stays locked until the statement commits, so writes under one lock
 * are serialised), and `write` — built `guarded`, so it runs only when `fence` returned
 * a row — writes the row. Answers one row: `fenced` (1 raised, 0 stale) then the
 * write's RETURNING columns (NULL when it wrote nothing). A failing write (a constraint)
 * fails the statement, and the fence is not raised either.
 * `write` uses $1…$n; the lock is $n+1 and the token $n+2.
 */
export function fencedWrite(fenceTable: string, write: string, n: number): string {
  return (
    `WITH fence AS (INSERT INTO ${fenceTable} AS f (lock, highest) VALUES ($${n + 1}::text, $${n + 2}::bigint) ` +
    `ON CONFLICT (lock) DO UPDATE SET highest = EXCLUDED.highest WHERE f.highest <= EXCLUDED.highest RETURNING 1), ` +
    `w AS (${write}) ` +
    `SELECT (SELECT count(*) FROM fence)::int AS fenced, w.* FROM (SELECT 1) AS one LEFT JOIN w ON true`
  );
}

/** One statement selecting the canonical text of values from a URL (canonical.ts `ask`). */
export function canonicalTexts(expressions: readonly string[]): string {
  return `SELECT ${expressions.join(', ')}`;
}
