/**
 * The JSON ↔ SQL type mapping of the postgres kind. Every value travels as text: a
 * write passes each value as a text parameter cast to the column's declared type
 * (`$n::numeric(10,2)`), a read selects each column as text through an expression
 * that fixes its format (ISO 8601 for timestamps, base64 for bytea), and this module
 * turns the text into JSON. So nothing depends on the driver's type parsers, and a
 * bigint or numeric never passes through a JS number.
 *
 * | SQL                              | JSON                                   |
 * | -------------------------------- | -------------------------------------- |
 * | boolean                          | true / false                           |
 * | smallint, integer                | number                                 |
 * | bigint, numeric                  | decimal string                         |
 * | real, double precision           | number ("NaN", "Infinity" as strings)  |
 * | json, jsonb                      | any JSON value                         |
 * | timestamp, timestamptz, date     | ISO 8601 string                        |
 * | bytea                            | base64 string                          |
 * | text, varchar, char, uuid, other | string (other types: their text form)  |
 * | NULL                             | null                                   |
 */
import { quoteIdent } from '../../../store/sql/driver.js';

export type Category =
  | 'bool'
  | 'int'
  | 'bigint'
  | 'numeric'
  | 'float'
  | 'json'
  | 'timestamp'
  | 'bytea'
  | 'uuid'
  | 'text'
  | 'other';

export interface Column {
  readonly name: string;
  /** The declared type without its modifier (format_type(oid, NULL)): the cast of every parameter. */
  readonly sqlType: string;
  /** The type (or a domain's base type) name in pg_type, e.g. int4, timestamptz. */
  readonly baseType: string;
  readonly category: Category;
}

const CATEGORIES: Readonly<Record<string, Category>> = {
  bool: 'bool',
  int2: 'int',
  int4: 'int',
  int8: 'bigint',
  numeric: 'numeric',
  float4: 'float',
  float8: 'float',
  json: 'json',
  jsonb: 'json',
  timestamp: 'timestamp',
  timestamptz: 'timestamp',
  date: 'timestamp',
  bytea: 'bytea',
  uuid: 'uuid',
  text: 'text',
  varchar: 'text',
  bpchar: 'text',
  name: 'text',
  citext: 'text',
};

export function categoryOf(baseType: string): Category {
  return Object.hasOwn(CATEGORIES, baseType) ? (CATEGORIES[baseType] as Category) : 'other';
}

/** The select-list expression that reads `col` as text in our JSON format. */
export function readExpression(col: Column, qualifier = ''): string {
  const ref = `${qualifier}${quoteIdent(col.name)}`;
  switch (col.category) {
    case 'timestamp':
      // to_json prints ISO 8601; the pool's sessions run with TimeZone=UTC.
      return `to_json(${ref}) #>> '{}'`;
    case 'bytea':
      return `translate(encode(${ref}, 'base64'), E'\\n', '')`;
    default:
      return `${ref}::text`;
  }
}

/** The placeholder of parameter `$n` for a value of `col` (the value passed as text). */
export function placeholder(col: Column, n: number): string {
  if (col.category === 'bytea') return `decode($${n}::text, 'base64')`;
  return `$${n}::${col.sqlType}`;
}

/** Turns a column's text (as selected by readExpression) into its JSON value. */
export function decode(col: Column, text: string | null): unknown {
  if (text === null) return null;
  switch (col.category) {
    case 'bool':
      return text === 't' || text === 'true';
    case 'int':
      return Number(text);
    case 'float': {
      const n = Number(text);
      return Number.isFinite(n) ? n : text;
    }
    case 'json':
      return JSON.parse(text) as unknown;
    default:
      return text;
  }
}

export type Encoded = { ok: true; text: string | null } | { ok: false; message: string };

const INT_RANGE: Readonly<Record<string, [number, number]>> = {
  int2: [-32768, 32767],
  int4: [-2147483648, 2147483647],
};
const INT8_MIN = -(2n ** 63n);
const INT8_MAX = 2n ** 63n - 1n;
const DECIMAL_INT = /^-?(0|[1-9][0-9]*)$/;
const NUMERIC = /^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$/;
const ISO_8601 =
  /^[0-9]{4,}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?(Z|[+-][0-9]{2}(:?[0-9]{2})?)?)?$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const UUID = /^\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\}?$/;

const bad = (message: string): Encoded => ({ ok: false, message });
const text = (t: string): Encoded => ({ ok: true, text: t });

/** Checks a JSON value for `col` and gives the text passed as its parameter. */
export function encode(col: Column, value: unknown): Encoded {
  if (value === null) return { ok: true, text: null };
  switch (col.category) {
    case 'bool':
      return typeof value === 'boolean' ? text(value ? 'true' : 'false') : bad('expected true or false');
    case 'int': {
      const [min, max] = INT_RANGE[col.baseType] ?? [-2147483648, 2147483647];
      if (typeof value !== 'number' || !Number.isInteger(value)) return bad('expected an integer');
      return value < min || value > max ? bad(`out of range for ${col.sqlType}`) : text(String(value));
    }
    case 'bigint': {
      const t = typeof value === 'number' && Number.isSafeInteger(value) ? String(value) : value;
      if (typeof t !== 'string' || !DECIMAL_INT.test(t))
        return bad('expected an integer as a decimal string');
      const b = BigInt(t);
      return b < INT8_MIN || b > INT8_MAX ? bad(`out of range for ${col.sqlType}`) : text(t);
    }
    case 'numeric': {
      if (typeof value === 'number') return Number.isFinite(value) ? text(String(value)) : bad('not finite');
      if (typeof value !== 'string' || !(NUMERIC.test(value) || value === 'NaN'))
        return bad('expected a decimal number as a string');
      return text(value);
    }
    case 'float':
      if (typeof value === 'number') return text(String(value));
      if (value === 'NaN' || value === 'Infinity' || value === '-Infinity') return text(value);
      return bad('expected a number');
    case 'json':
      return text(JSON.stringify(value));
    case 'timestamp':
      if (typeof value !== 'string' || !(ISO_8601.test(value) || /^-?infinity$/.test(value)))
        return bad('expected an ISO 8601 date or timestamp string');
      return text(value);
    case 'bytea':
      return typeof value === 'string' && BASE64.test(value) ? text(value) : bad('expected base64');
    case 'uuid':
      return typeof value === 'string' && UUID.test(value) ? text(value) : bad('expected a UUID string');
    case 'text':
    case 'other':
      if (typeof value !== 'string') return bad('expected a string');
      return value.includes('\u0000') ? bad('must not contain NUL characters') : text(value);
  }
}

/**
 * Reads a value given as text in a URL (the key in the path, a list filter) as the
 * JSON value `encode` expects for `col`.
 */
export function fromUrlText(col: Column, t: string): unknown {
  switch (col.category) {
    case 'bool':
      return t === 'true' ? true : t === 'false' ? false : t;
    case 'int':
    case 'float':
      return t.trim() !== '' && Number.isFinite(Number(t)) ? Number(t) : t;
    default:
      return t;
  }
}
