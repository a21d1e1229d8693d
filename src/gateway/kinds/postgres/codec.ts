/**
 * The JSON ↔ SQL mapping of the postgres kind. Every value travels as text: a write
 * passes each value as a text parameter cast to the column's type (column.ts `cast`;
 * the assignment to the column applies its modifier), and a read selects each column
 * as it is (so a result reports the column's type: runner.ts) and takes the text
 * Postgres prints for it in the session's pinned formats (session.ts). Numbers and
 * json/jsonb go into the answer as the digits and text Postgres printed, never through
 * a JS number, and a JSON number is written only where the column holds it exactly.
 *
 * | SQL                                   | JSON                                        |
 * | ------------------------------------- | ------------------------------------------- |
 * | boolean                               | true / false                                |
 * | smallint, integer                     | number                                      |
 * | bigint, numeric                       | decimal string                              |
 * | real, double precision                | number ("NaN", "Infinity" as strings)       |
 * | json, jsonb                           | any JSON value, as stored                   |
 * | timestamp, timestamptz, date          | ISO 8601 string                             |
 * | bytea                                 | base64 string                               |
 * | text, varchar, char, uuid, bit, other | string (other types: their text form)       |
 * | NULL                                  | null                                        |
 */
import type { Column } from './column.js';
import { dateProblem, isoOf } from './datetime.js';
import { floatProblem, integerText, numericProblem, parseDecimal, type Decimal } from './decimal.js';
import type { BodyValue } from './json-body.js';

/** A value of a JSON number as Postgres prints numbers (no NaN or Infinity). */
const JSON_NUMBER = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$/;

/** The value's text as a URL or a client writes it: a string's contents, a number's digits. */
export function valueText(col: Column, text: string): string {
  switch (col.category) {
    case 'bool':
      return text === 't' ? 'true' : 'false';
    case 'timestamp':
    case 'timestamptz':
    case 'date':
      return isoOf(text, col.category);
    case 'bytea':
      // hex output (bytea_output = hex): \x0a0b…
      return Buffer.from(text.slice(2), 'hex').toString('base64');
    case 'text':
      // char(n) pads to n on output; its spaces are no part of the value (as `::text` reads it).
      return col.baseType === 'bpchar' ? text.replace(/ +$/, '') : text;
    default:
      return text;
  }
}

/** The JSON text of a column's value, from the text Postgres printed for it (null: SQL NULL). */
export function jsonOf(col: Column, text: string | null): string {
  if (text === null) return 'null';
  switch (col.category) {
    case 'bool':
      return text === 't' ? 'true' : 'false';
    case 'int':
    case 'json':
      return text;
    case 'float':
      return JSON_NUMBER.test(text) ? text : JSON.stringify(text);
    case 'bytea':
      return `"${valueText(col, text)}"`;
    default:
      return JSON.stringify(valueText(col, text));
  }
}

export type Encoded = { ok: true; text: string | null } | { ok: false; message: string };

const INT_RANGE: Readonly<Record<string, readonly [bigint, bigint]>> = {
  int2: [-32768n, 32767n],
  int4: [-2147483648n, 2147483647n],
  int8: [-(2n ** 63n), 2n ** 63n - 1n],
};
const DECIMAL_INT = /^-?(0|[1-9][0-9]*)$/;
const NUMERIC_WORDS = new Set(['NaN', 'Infinity', '-Infinity']);
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const UUID = /^\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\}?$/;
const BITS = /^[01]*$/;

const bad = (message: string): Encoded => ({ ok: false, message });
const ok = (t: string): Encoded => ({ ok: true, text: t });

/** An integer (plain decimal digits) within the column's range, or why not. */
export function integerIn(col: Column, digits: string): Encoded {
  const [min, max] = INT_RANGE[col.baseType] ?? (INT_RANGE.int4 as readonly [bigint, bigint]);
  const b = BigInt(digits);
  return b < min || b > max ? bad(`is out of range for ${col.declared}`) : ok(digits);
}

/** The characters of `s` (code points), counted only as far as needed against `limit`. */
function longerThan(s: string, limit: number): boolean {
  if (s.length <= limit) return false;
  let n = 0;
  for (const _ of s) if (++n > limit) return true;
  return false;
}

/** A string for a text-like column, within its declared length. */
export function textIn(col: Column, s: string): Encoded {
  if (s.includes('\u0000')) return bad('must not contain NUL characters');
  const n = col.mods.length;
  if (col.baseType === 'name' && Buffer.byteLength(s) > 63)
    return bad('is longer than 63 bytes (a name would be cut)');
  // char(n) ignores trailing spaces (Postgres drops them past n); varchar(n) keeps them.
  if (n !== null && longerThan(col.baseType === 'bpchar' ? s.replace(/ +$/, '') : s, n))
    return bad(`is longer than ${n} characters (${col.declared})`);
  return ok(s);
}

function numericIn(col: Column, text: string, d: Decimal | null, isNumber = false): Encoded {
  if (d === null) return bad(isNumber ? `is out of range for ${col.declared}` : 'expected a decimal number');
  const { precision, scale } = col.mods;
  if (precision !== null && scale !== null) {
    const problem = numericProblem(d, precision, scale);
    if (problem !== null) return bad(problem);
  }
  return ok(text);
}

function bitsIn(col: Column, s: string): Encoded {
  if (!BITS.test(s)) return bad('expected a string of 0 and 1');
  const n = col.mods.length;
  if (n !== null && (col.baseType === 'bit' ? s.length !== n : s.length > n))
    return bad(`${col.baseType === 'bit' ? 'is not' : 'is longer than'} ${n} bits (${col.declared})`);
  return ok(s);
}

/** Checks a body value for `col` and gives the text passed as its parameter. */
export function encode(col: Column, v: BodyValue): Encoded {
  if (v.kind === 'null') return { ok: true, text: null };
  switch (col.category) {
    case 'bool':
      return v.kind === 'bool' ? ok(v.value ? 'true' : 'false') : bad('expected true or false');
    case 'int':
      return v.kind === 'number' ? integerNumber(col, v.raw) : bad('expected an integer');
    case 'bigint':
      if (v.kind === 'number') return integerNumber(col, v.raw);
      if (v.kind === 'string' && DECIMAL_INT.test(v.value)) return integerIn(col, v.value);
      return bad('expected an integer as a decimal string');
    case 'numeric':
      if (v.kind === 'number') return numericIn(col, v.raw, parseDecimal(v.raw), true);
      if (v.kind !== 'string') return bad('expected a decimal number as a string');
      return NUMERIC_WORDS.has(v.value) ? ok(v.value) : numericIn(col, v.value, parseDecimal(v.value));
    case 'float': {
      if (v.kind === 'string' && NUMERIC_WORDS.has(v.value)) return ok(v.value);
      if (v.kind !== 'number') return bad('expected a number');
      const problem = floatProblem(v.raw, parseDecimal(v.raw), col.baseType === 'float4');
      return problem === null ? ok(v.raw) : bad(problem);
    }
    case 'json':
      return ok(v.raw);
    case 'timestamp':
    case 'timestamptz':
    case 'date': {
      if (v.kind !== 'string') return bad('expected an ISO 8601 date or timestamp string');
      const problem = dateProblem(v.value, col.category, col.mods.fractionDigits);
      return problem === null ? ok(v.value) : bad(problem);
    }
    case 'bytea':
      return v.kind === 'string' && BASE64.test(v.value) ? ok(v.value) : bad('expected base64');
    case 'uuid':
      return v.kind === 'string' && UUID.test(v.value) ? ok(v.value) : bad('expected a UUID string');
    case 'bit':
      return v.kind === 'string' ? bitsIn(col, v.value) : bad('expected a string of 0 and 1');
    case 'text':
      return v.kind === 'string' ? textIn(col, v.value) : bad('expected a string');
    case 'citext':
    case 'other':
      if (v.kind !== 'string') return bad('expected a string');
      return v.value.includes('\u0000') ? bad('must not contain NUL characters') : ok(v.value);
  }
}

/** A JSON number as an integer of the column, as plain digits (1e3 → 1000), or why not. */
function integerNumber(col: Column, raw: string): Encoded {
  if (DECIMAL_INT.test(raw) && raw.length < 20) return integerIn(col, raw === '-0' ? '0' : raw);
  const d = parseDecimal(raw);
  // An exponent past a million: no integer type holds it.
  if (d === null) return bad(`is out of range for ${col.declared}`);
  if (d.exp < 0) return bad('expected an integer');
  const digits = integerText(d);
  return digits === null ? bad(`is out of range for ${col.declared}`) : integerIn(col, digits);
}

/** A row (values as Postgres printed them, from `offset` on) as a JSON object of `columns`. */
export function rowJson(columns: readonly Column[], row: readonly (string | null)[], offset = 0): string {
  let out = '{';
  for (let i = 0; i < columns.length; i++) {
    const c = columns[i] as Column;
    out += `${i === 0 ? '' : ','}${c.jsonName}:${jsonOf(c, row[offset + i] ?? null)}`;
  }
  return `${out}}`;
}
