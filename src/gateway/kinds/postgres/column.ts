/**
 * A table column as the postgres kind uses it, built from one row of the catalog query
 * (statements.sql, `table_columns`): its JSON category, the modifiers its declared type
 * carries (`char(8)`, `numeric(12,2)`, `timestamp(3)`: from `atttypmod`), the cast every
 * parameter gets, and the type Postgres reports for it in a result (which is how a
 * changed column type is noticed: catalog.ts, runner.ts).
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
  | 'timestamptz'
  | 'date'
  | 'bytea'
  | 'uuid'
  /** text, varchar(n), char(n), name, enums: a string that is its own text form. */
  | 'text'
  /** citext: a string compared without case. */
  | 'citext'
  | 'bit'
  /** Anything else (arrays, interval, time, inet, …): its Postgres text form. */
  | 'other';

/** What a declared type's modifier says, read from `atttypmod`; null where it says nothing. */
export interface Modifiers {
  /** char(n), varchar(n): characters; bit(n), varbit(n): bits. */
  readonly length: number | null;
  /** numeric(p,s). */
  readonly precision: number | null;
  readonly scale: number | null;
  /** timestamp(p), timestamptz(p): digits of fractional seconds (6 when not declared). */
  readonly fractionDigits: number | null;
}

export interface Column {
  readonly name: string;
  /** `"name"`, as a JSON string (a key of every row answered). */
  readonly jsonName: string;
  /** The quoted identifier. */
  readonly ident: string;
  readonly category: Category;
  /** pg_type name of the type, or of a domain's base type: int4, bpchar, _numeric, varbit. */
  readonly baseType: string;
  readonly mods: Modifiers;
  /** The declared type with its modifier (`character(8)`, a domain's name): for casts whose text is compared. */
  readonly declared: string;
  /**
   * The cast of every parameter: the (base) type without a length limit. An explicit cast
   * to `char(3)` or `varchar(3)` (or to a domain over one) would cut a longer value
   * silently; cast to `bpchar`, the assignment to the column refuses it (SQLSTATE 22001),
   * and a domain's checks apply on assignment too.
   */
  readonly cast: string;
  /** The type and modifier Postgres reports in a result (a domain's base type and typmod). */
  readonly oid: number;
  readonly typmod: number;
  /** Equal values have equal text (false: a nondeterministic collation, e.g. case-insensitive). */
  readonly deterministic: boolean;
}

/** One row of `table_columns`. */
export interface ColumnRow {
  name: string;
  oid: number;
  typmod: number;
  base_type: string;
  /** pg_type.typtype of the base: 'e' for an enum. */
  base_kind: string;
  base_sql: string;
  declared: string;
  deterministic: boolean;
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
  timestamptz: 'timestamptz',
  date: 'date',
  bytea: 'bytea',
  uuid: 'uuid',
  text: 'text',
  varchar: 'text',
  bpchar: 'text',
  name: 'text',
  citext: 'citext',
  bit: 'bit',
  varbit: 'bit',
};

export function categoryOf(baseType: string, baseKind = 'b'): Category {
  if (baseKind === 'e') return 'text';
  return Object.hasOwn(CATEGORIES, baseType) ? (CATEGORIES[baseType] as Category) : 'other';
}

/** Types whose cast without a modifier still has a length limit: cast to the unlimited kin. */
const UNLIMITED: Readonly<Record<string, string>> = {
  bpchar: 'pg_catalog.bpchar',
  _bpchar: 'pg_catalog.bpchar[]',
  bit: 'pg_catalog.varbit',
  _bit: 'pg_catalog.varbit[]',
};

/** Reads the modifier of a (base) type from its typmod, as Postgres encodes it. */
export function modifiersOf(baseType: string, typmod: number): Modifiers {
  const none = { length: null, precision: null, scale: null, fractionDigits: null };
  switch (baseType) {
    case 'bpchar':
    case 'varchar':
      return { ...none, length: typmod >= 4 ? typmod - 4 : null };
    case 'bit':
    case 'varbit':
      return { ...none, length: typmod >= 0 ? typmod : null };
    case 'numeric': {
      if (typmod < 4) return none;
      const m = typmod - 4;
      // The scale is 11 bits, signed (numeric(3,-2) since Postgres 15).
      return { ...none, precision: (m >> 16) & 0xffff, scale: ((m & 0x7ff) ^ 0x400) - 0x400 };
    }
    case 'timestamp':
    case 'timestamptz':
      return { ...none, fractionDigits: typmod >= 0 ? typmod : 6 };
    default:
      return none;
  }
}

export function columnOf(row: ColumnRow): Column {
  return {
    name: row.name,
    jsonName: JSON.stringify(row.name),
    ident: quoteIdent(row.name),
    category: categoryOf(row.base_type, row.base_kind),
    baseType: row.base_type,
    mods: modifiersOf(row.base_type, row.typmod),
    declared: row.declared,
    cast: Object.hasOwn(UNLIMITED, row.base_type) ? (UNLIMITED[row.base_type] as string) : row.base_sql,
    oid: row.oid,
    typmod: row.typmod,
    deterministic: row.deterministic,
  };
}
