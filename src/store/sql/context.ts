/**
 * What the SQL operations share: the driver, the statements bound to the schema,
 * the NOTIFY channel, and the conversions from the text the SQL returns.
 */
import { MAX_TOKEN, type FencingToken } from '../../tokens.js';
import type { ResetWatch } from '../reset.js';
import type { SqlDriver } from './driver.js';
import type { Queries } from './queries.js';

export interface SqlContext {
  readonly driver: SqlDriver;
  readonly q: Queries;
  /** NOTIFY channel of this schema; payloads are lock keys. */
  readonly channel: string;
  /**
   * What this process verified of the store (docs/adr/0019-store-identity.md): the oid of
   * the locks table, which grants, renewals and admissions check (check_identity); null
   * until verified.
   */
  readonly verified: { oid: string | null };
  /** Epochs and tokens seen, resets to report (Store.onReset). */
  readonly resets: ResetWatch;
}

/** A bigint column read as text (never through a JS number). */
export function big(text: string): bigint {
  return BigInt(text);
}

export function bigOrNull(text: string | null): bigint | null {
  return text === null ? null : BigInt(text);
}

/** A store-clock time or duration in ms: far below 2^53, safe as a number. */
export function ms(text: string): number {
  return Number(text);
}

export function msOrNull(text: string | null): number | null {
  return text === null ? null : Number(text);
}

/**
 * A token as a statement parameter. Clamped into bigint's range so an out-of-range
 * token (never issued, so refused by the checks that compare the real value) is
 * an answer, not a cast error.
 */
export function tokenParam(token: FencingToken): string {
  const t = token < 0n ? 0n : token > MAX_TOKEN ? MAX_TOKEN : token;
  return t.toString(10);
}

export function maxBig(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

/** The single row a statement must return; its absence is a bug in the SQL, not an outcome. */
export function one<R>(rows: R[], what: string): R {
  const row = rows[0];
  if (row === undefined) throw new Error(`SQL statement ${what} returned no row`);
  return row;
}
