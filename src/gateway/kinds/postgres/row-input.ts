/**
 * Checks what a client sends against the route and the table before anything touches
 * the database: the key in the path, a write's JSON body, a list's query. Pure
 * functions returning results; a refusal is 400 invalid-row naming the column.
 */
import type { ProblemError } from '../../../errors.js';
import { encode, fromUrlText, type Column } from './codec.js';
import { invalidRow } from './refusals.js';
import type { TableShape } from './rows-sql.js';

export type Checked<T> = { ok: true; value: T } | { ok: false; problem: ProblemError };

const refuse = (detail: string, column?: string): { ok: false; problem: ProblemError } => ({
  ok: false,
  problem: invalidRow(detail, column),
});

/** The key from the path, as the text parameter of the key column. */
export function checkKey(shape: TableShape, raw: string): Checked<string> {
  const e = encode(shape.key, fromUrlText(shape.key, raw));
  if (!e.ok || e.text === null)
    return refuse(`the key in the path: ${e.ok ? 'null' : e.message}`, shape.key.name);
  return { ok: true, value: e.text };
}

export interface RowWrite {
  /** The columns present in the body, in the route's order. */
  given: Column[];
  /** Their parameters, as text (null: SQL NULL). */
  params: (string | null)[];
}

/**
 * A write's body: a JSON object of declared columns (and optionally the key, equal to
 * the path's). `keyText` is the path key as checkKey encoded it.
 */
export function checkRow(shape: TableShape, body: unknown, keyText: string): Checked<RowWrite> {
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return refuse('the body must be a JSON object of column values');
  const entries = Object.entries(body as Record<string, unknown>);
  const byName = new Map(shape.columns.map((c) => [c.name, c]));
  for (const [name, value] of entries) {
    if (name === shape.key.name) {
      const e = encode(shape.key, value);
      if (!e.ok) return refuse(`"${name}": ${e.message}`, name);
      if (e.text !== keyText) return refuse(`"${name}" in the body differs from the key in the path`, name);
    } else if (!byName.has(name)) {
      return refuse(`"${name}" is not a column this route may write`, name);
    }
  }
  const given: Column[] = [];
  const params: (string | null)[] = [];
  const present = new Map(entries);
  for (const col of shape.columns) {
    if (!present.has(col.name)) continue;
    const e = encode(col, present.get(col.name));
    if (!e.ok) return refuse(`"${col.name}": ${e.message}`, col.name);
    given.push(col);
    params.push(e.text);
  }
  return { ok: true, value: { given, params } };
}

export const LIST_LIMIT_DEFAULT = 100;
export const LIST_LIMIT_MAX = 1000;

export interface ListQuery {
  filters: Column[];
  params: string[];
  limit: number;
}

/** `?status=shipped&limit=50`: equality on declared columns (or the key), each once. */
export function checkListQuery(shape: TableShape, query: string): Checked<ListQuery> {
  const params = new URLSearchParams(query);
  const all = new Map([shape.key, ...shape.columns].map((c) => [c.name, c]));
  const seen = new Set<string>();
  const filters: Column[] = [];
  const values: string[] = [];
  let limit = LIST_LIMIT_DEFAULT;
  for (const [name, raw] of params) {
    if (seen.has(name)) return refuse(`"${name}" is given more than once`, name);
    seen.add(name);
    if (name === 'limit') {
      if (!/^[0-9]{1,4}$/.test(raw) || Number(raw) < 1 || Number(raw) > LIST_LIMIT_MAX)
        return refuse(`limit must be an integer from 1 to ${LIST_LIMIT_MAX}`, 'limit');
      limit = Number(raw);
      continue;
    }
    const col = all.get(name);
    if (col === undefined) return refuse(`"${name}" is not a column of this route`, name);
    if (col.category === 'json') return refuse(`"${name}" is a JSON column: no equality filter`, name);
    const e = encode(col, fromUrlText(col, raw));
    if (!e.ok || e.text === null) return refuse(`"${name}": ${e.ok ? 'null' : e.message}`, name);
    filters.push(col);
    values.push(e.text);
  }
  return { ok: true, value: { filters, params: values, limit } };
}
