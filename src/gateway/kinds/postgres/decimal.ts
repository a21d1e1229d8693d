/**
 * Decimal numbers as written (a JSON number's source text, a numeric string), judged
 * without passing through a JS number: whether a column holds the value exactly. A
 * JSON number goes to Postgres as the digits the client sent, or is refused.
 */

/** ±digits × 10^exp; `digits` has no leading or trailing zeros ('' is zero). */
export interface Decimal {
  readonly neg: boolean;
  readonly digits: string;
  readonly exp: number;
}

/** `1`, `-0.5`, `1e3`, `+.5`, `5.`: what Postgres's numeric input reads (and every JSON number). */
const DECIMAL = /^([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?$/;

/** An exponent past this is beyond every type here (numeric's own limit is ±1000). */
const EXP_LIMIT = 1_000_000;

export function parseDecimal(text: string): Decimal | null {
  const m = DECIMAL.exec(text);
  if (m === null) return null;
  const whole = m[2] as string;
  const frac = m[3] ?? '';
  if (whole === '' && frac === '') return null;
  const e = m[4] === undefined ? 0 : Number(m[4]);
  if (!Number.isFinite(e) || Math.abs(e) > EXP_LIMIT) return null;
  let digits = whole + frac;
  let exp = e - frac.length;
  let start = 0;
  while (start < digits.length && digits.charCodeAt(start) === 48) start++;
  let end = digits.length;
  while (end > start && digits.charCodeAt(end - 1) === 48) end--;
  exp += digits.length - end;
  digits = digits.slice(start, end);
  return { neg: m[1] === '-' && digits !== '', digits, exp: digits === '' ? 0 : exp };
}

/** An integral `d` as plain decimal digits, or null when it has more than `maxDigits`. */
export function integerText(d: Decimal, maxDigits = 20): string | null {
  if (d.digits === '') return '0';
  if (d.exp < 0) throw new RangeError('not an integer');
  if (d.digits.length + d.exp > maxDigits) return null;
  return (d.neg ? '-' : '') + d.digits + '0'.repeat(d.exp);
}

export function sameDecimal(a: Decimal, b: Decimal): boolean {
  return a.neg === b.neg && a.digits === b.digits && a.exp === b.exp;
}

/**
 * Why numeric(p,s) would not hold `d` as it is (rounded: more decimals than s; too large:
 * more integer digits than p − s), or null.
 */
export function numericProblem(d: Decimal, precision: number, scale: number): string | null {
  if (d.digits === '') return null;
  if (-d.exp > scale)
    return scale > 0
      ? `has more than ${scale} decimal places (numeric(${precision},${scale}) would round it)`
      : `is not a multiple of ${10 ** -scale} (numeric(${precision},${scale}) would round it)`;
  if (d.digits.length + d.exp > precision - scale) return `is too large for numeric(${precision},${scale})`;
  return null;
}

/** The shortest decimal that reads back as `f`, a float4 value (what Postgres prints for it). */
function shortestFloat4(f: number): string {
  for (let p = 1; p < 9; p++) {
    const s = f.toPrecision(p);
    if (Math.fround(Number(s)) === f) return s;
  }
  return f.toPrecision(9);
}

/**
 * Why `raw` (a JSON number) is not exactly a value of float4 or float8, or null. A float
 * column reads back the shortest decimal of its binary value; a number is accepted when
 * that is the number sent, so what is written is what is read.
 */
export function floatProblem(raw: string, d: Decimal | null, float4: boolean): string | null {
  const type = float4 ? 'real' : 'double precision';
  const n = float4 ? Math.fround(Number(raw)) : Number(raw);
  if (!Number.isFinite(n)) return `is out of range for ${type}`;
  // d is null for an exponent past a million: 1e-9999999 is below every float.
  if (d !== null && d.digits === '') return null;
  if (n === 0) return `is too small for ${type} (it would be stored as 0)`;
  const back = float4 ? shortestFloat4(n) : String(n);
  const same = parseDecimal(back);
  if (same !== null && d !== null && sameDecimal(same, d)) return null;
  return `is not exactly a ${type} (it would read back as ${back})`;
}
