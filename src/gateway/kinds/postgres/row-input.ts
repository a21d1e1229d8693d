/**
 * Checks what a client sends against the route and the table before anything is
 * written: a write's body (its members as parsed by json-body.ts), a list's query. The
 * values a URL carries (the key, filters, `after`) are judged by canonical.ts. Pure
 * functions returning results; a refusal is 400 invalid-row naming the column.
 */
import type { ProblemError } from '../../../errors.js';
import { urlValue, type UrlValue } from './canonical.js';
import { encode } from './codec.js';
import type { Column } from './column.js';
import type { BodyValue } from './json-body.js';
import { invalidRow } from './refusals.js';
import type { TableShape } from './rows-sql.js';

export type Checked<T> = { ok: true; value: T } | { ok: false; problem: ProblemError };

/** A refusal that depends on the column types (catalog.ts confirms them before it is answered). */
export type TypeRefusal = { ok: false; problem: ProblemError; byType: true };

export const refuse = (detail: string, column?: string): { ok: false; problem: ProblemError } => ({
  ok: false,
  problem: invalidRow(detail, column),
});

const refuseByType = (detail: string, column: string): TypeRefusal => ({
  ok: false,
  problem: invalidRow(detail, column),
  byType: true,
});

export interface RowWrite {
  /** The columns present in the body, in the route's order. */
  given: Column[];
  /** Their parameters, as text (null: SQL NULL). */
  params: (string | null)[];
}

/**
 * A write's body: an object of declared columns (and optionally the key, spelled as in
 * the path). `keyText` is the key from the path, already found canonical.
 */
export function checkRow(
  shape: TableShape,
  body: ReadonlyMap<string, BodyValue>,
  keyText: string,
): Checked<RowWrite> | TypeRefusal {
  const byName = new Map(shape.columns.map((c) => [c.name, c]));
  for (const [name, value] of body) {
    if (name === shape.key.name) {
      const e = encode(shape.key, value);
      if (!e.ok) return refuseByType(`"${name}": ${e.message}`, name);
      if (e.text !== keyText)
        return refuse(
          `"${name}" in the body differs from the key in the path (${JSON.stringify(keyText)})`,
          name,
        );
    } else if (!byName.has(name)) {
      return refuse(`"${name}" is not a column this route may write`, name);
    }
  }
  const given: Column[] = [];
  const params: (string | null)[] = [];
  for (const col of shape.columns) {
    const value = body.get(col.name);
    if (value === undefined) continue;
    const e = encode(col, value);
    if (!e.ok) return refuseByType(`"${col.name}": ${e.message}`, col.name);
    given.push(col);
    params.push(e.text);
  }
  return { ok: true, value: { given, params } };
}

/** A value from the URL, for `col`, named `field` in refusals. */
export interface UrlInput {
  readonly col: Column;
  readonly field: string;
  readonly raw: string;
  readonly check: UrlValue;
}

export function urlInput(col: Column, field: string, raw: string): UrlInput {
  return { col, field, raw, check: urlValue(col, raw) };
}

export const LIST_LIMIT_DEFAULT = 100;
export const LIST_LIMIT_MAX = 1000;

export interface ListQuery {
  /** The equality filters, in the order given. */
  filters: UrlInput[];
  /** The key to start after (the previous page's `next`). */
  after: UrlInput | null;
  limit: number;
  /** The query's parameters other than `after`, to build the next page's link. */
  rest: [string, string][];
}

/**
 * The pairs of a query string, percent-decoded as UTF-8 (`+` is a space); null when an
 * escape is not UTF-8 (URLSearchParams would turn it into U+FFFD, another value).
 */
export function queryPairs(query: string): [string, string][] | null {
  const out: [string, string][] = [];
  for (const part of query.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const [k, v] = eq < 0 ? [part, ''] : [part.slice(0, eq), part.slice(eq + 1)];
    try {
      out.push([decodeURIComponent(k.replace(/\+/g, ' ')), decodeURIComponent(v.replace(/\+/g, ' '))]);
    } catch {
      return null;
    }
  }
  return out;
}

/** `?status=shipped&limit=50&after=42`: equality on declared columns (or the key), each once. */
export function checkListQuery(shape: TableShape, query: string): Checked<ListQuery> {
  const pairs = queryPairs(query);
  if (pairs === null) return refuse('the query has a %-escape that is not UTF-8');
  const all = new Map([shape.key, ...shape.columns].map((c) => [c.name, c]));
  const seen = new Set<string>();
  const filters: UrlInput[] = [];
  const rest: [string, string][] = [];
  let after: UrlInput | null = null;
  let limit = LIST_LIMIT_DEFAULT;
  for (const [name, raw] of pairs) {
    if (seen.has(name)) return refuse(`"${name}" is given more than once`, name);
    seen.add(name);
    if (name === 'after') {
      after = urlInput(shape.key, 'after', raw);
      continue;
    }
    rest.push([name, raw]);
    if (name === 'limit') {
      if (!/^[0-9]{1,4}$/.test(raw) || Number(raw) < 1 || Number(raw) > LIST_LIMIT_MAX)
        return refuse(`limit must be an integer from 1 to ${LIST_LIMIT_MAX}`, 'limit');
      limit = Number(raw);
      continue;
    }
    const col = all.get(name);
    if (col === undefined) return refuse(`"${name}" is not a column of this route`, name);
    filters.push(urlInput(col, name, raw));
  }
  return { ok: true, value: { filters, after, limit, rest } };
}
