/**
 * One spelling per value in a URL. The key in the path names the row and the lock
 * (`order:{id}`), so if `1e3`, `+1000` and `1000` all reached row 1000, one row would
 * have three locks and a stale owner could write under a lock nobody else holds. A value
 * from a URL (the key, a list filter, `after`) is therefore accepted only in its column
 * type's canonical text — the text the gateway answers with for that value — and refused
 * otherwise, with the canonical spelling in the message where there is one.
 *
 * Most key types are judged here (integers, uuid, text, char(n), bool, bytea). For the
 * others (numeric, floats, dates and timestamps, citext, bit, enums' kin…), Postgres
 * prints the canonical text itself (`ask`): equal values print equally, modifiers
 * applied (`1.5` in a numeric(10,2) key prints `1.50`; `-0` and `0` are one float).
 */
import type { Column } from './column.js';
import { integerIn, textIn, valueText } from './codec.js';
import { integerText, parseDecimal } from './decimal.js';

export type UrlValue =
  | { readonly kind: 'ok'; readonly text: string }
  | { readonly kind: 'refused'; readonly message: string }
  /** The database decides: `sql($n)` selects the canonical text of parameter $n. */
  | { readonly kind: 'ask'; readonly sql: (n: number) => string };

const DECIMAL_INT = /^-?(0|[1-9][0-9]*)$/;
const UUID_CANONICAL = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const UUID_ANY = /^\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\}?$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

const ok = (text: string): UrlValue => ({ kind: 'ok', text });
const refused = (message: string): UrlValue => ({ kind: 'refused', message });

/** The refusal of a spelling that names a valid value in another form. */
export function notCanonical(raw: string, canonical: string): string {
  return `must be spelled as the column prints it: "${canonical}" (not "${raw}")`;
}

function integer(col: Column, raw: string): UrlValue {
  if (DECIMAL_INT.test(raw) && raw !== '-0') {
    const e = integerIn(col, raw);
    return e.ok ? ok(raw) : refused(e.message);
  }
  const d = /^\s*[+-]?[0-9.]/.test(raw) ? parseDecimal(raw.trim()) : null;
  const same = d !== null && d.exp >= 0 ? integerText(d) : null;
  return refused(same !== null ? notCanonical(raw, same) : 'expected an integer in plain decimal digits');
}

/** Checks a value from a URL for `col`; the parameter text when it is canonical. */
export function urlValue(col: Column, raw: string): UrlValue {
  switch (col.category) {
    case 'bool':
      return raw === 'true' || raw === 'false' ? ok(raw) : refused('expected true or false');
    case 'int':
    case 'bigint':
      return integer(col, raw);
    case 'uuid':
      if (UUID_CANONICAL.test(raw)) return ok(raw);
      if (!UUID_ANY.test(raw)) return refused('expected a UUID');
      return refused(notCanonical(raw, canonicalUuid(raw)));
    case 'text': {
      const e = textIn(col, raw);
      if (!e.ok) return refused(e.message);
      // char(n) compares without trailing spaces, and prints without them.
      if (col.baseType === 'bpchar' && raw.endsWith(' '))
        return refused(notCanonical(raw, raw.replace(/ +$/, '')));
      return ok(raw);
    }
    case 'bytea': {
      if (!BASE64.test(raw)) return refused('expected base64');
      const again = Buffer.from(raw, 'base64').toString('base64');
      return again === raw ? ok(raw) : refused(notCanonical(raw, again));
    }
    case 'json':
      return refused('a json column has no equality: it cannot be a key or a filter');
    case 'numeric':
      // Unconstrained numeric keeps the scale it was given (1.5 = 1.50): trailing zeros dropped.
      return ask(
        col.mods.scale === null ? (n) => `trim_scale($${n}::numeric)` : (n) => `$${n}::${col.declared}`,
      );
    case 'float':
      // -0 = 0 in float comparisons; adding 0 prints both as 0.
      return ask((n) => `$${n}::${col.declared} + '0'::${col.declared}`);
    case 'citext':
      return ask((n) => `lower($${n}::${col.cast})`);
    default:
      return ask((n) => `$${n}::${col.declared}`);
  }
}

/** Postgres prints the value with its type's output function (`::text` is not always that: inet). */
const ask = (value: (n: number) => string): UrlValue => ({ kind: 'ask', sql: (n) => `concat(${value(n)})` });

function canonicalUuid(raw: string): string {
  const h = raw.replace(/[{}-]/g, '').toLowerCase();
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** After the database printed `printed` for a value asked about: its parameter text, or the refusal. */
export function answered(col: Column, raw: string, printed: string): UrlValue {
  const canonical = valueText(col, printed);
  return canonical === raw ? ok(raw) : refused(notCanonical(raw, canonical));
}

/**
 * The canonical URL text of a value as Postgres printed it in a row (for the list's
 * `after` cursor): the text the next request's check accepts.
 */
export function canonicalOf(col: Column, printed: string): string {
  const t = valueText(col, printed);
  switch (col.category) {
    case 'numeric':
      return col.mods.scale === null && t.includes('.') ? t.replace(/\.?0+$/, '') : t;
    case 'float':
      return t === '-0' ? '0' : t;
    case 'citext':
      return t.toLowerCase();
    default:
      return t;
  }
}
