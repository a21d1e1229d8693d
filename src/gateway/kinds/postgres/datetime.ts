/**
 * Dates and timestamps in ISO 8601, both ways: what a write may send for a `date`,
 * `timestamp(p)` or `timestamptz(p)` column (refusing what Postgres would change on the
 * way in: an offset on a timestamp without time zone, which it ignores; a time on a
 * date, which it drops; more fractional digits than p, which it rounds; second 60 or
 * hour 24, which it rolls over), and the JSON form of what it prints for them (ISO
 * DateStyle, TimeZone UTC: session.ts), as `to_json` writes it.
 */

const ISO =
  /^([0-9]{4,})-([0-9]{2})-([0-9]{2})(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]+))?)?)?(Z|[+-][0-9]{2}(?::?[0-9]{2}(?::?[0-9]{2})?)?)?( BC)?$/;

export type DateKind = 'date' | 'timestamp' | 'timestamptz';

const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function daysIn(year: number, month: number, bc: boolean): number {
  if (month !== 2) return DAYS[month - 1] as number;
  // Proleptic Gregorian, 1 BC being year 0 (a leap year), as Postgres counts.
  const y = bc ? 1 - year : year;
  return (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0 ? 29 : 28;
}

/** Why `text` is not a value of `kind` that Postgres stores as sent, or null. */
export function dateProblem(text: string, kind: DateKind, fractionDigits: number | null): string | null {
  if (text === 'infinity' || text === '-infinity') return null;
  const m = ISO.exec(text);
  const what = kind === 'date' ? 'an ISO 8601 date (YYYY-MM-DD)' : 'an ISO 8601 timestamp';
  if (m === null) return `expected ${what}`;
  const [, y, mo, d, h, mi, s, frac, offset, bc] = m;
  if (kind === 'date' && (h !== undefined || offset !== undefined))
    return 'expected a date without a time (YYYY-MM-DD)';
  if (kind === 'timestamp' && offset !== undefined)
    return 'is a timestamp without time zone: an offset would be ignored, not applied (send the local time, or use timestamptz)';
  const year = Number(y);
  const month = Number(mo);
  const day = Number(d);
  if (month < 1 || month > 12) return `has no month ${mo}`;
  if (day < 1 || day > daysIn(year, month, bc !== undefined)) return `has no day ${d} in month ${mo}`;
  if (h !== undefined && Number(h) > 23) return `has no hour ${h}`;
  if (mi !== undefined && Number(mi) > 59) return `has no minute ${mi}`;
  if (s !== undefined && Number(s) > 59) return `has no second ${s}`;
  if (frac !== undefined) {
    const allowed = fractionDigits ?? 6;
    if (/[1-9]/.test(frac.slice(allowed)))
      return `has more than ${allowed} fractional second digits (the column would round it)`;
  }
  return null;
}

/**
 * Postgres's ISO output → the JSON form: `2024-02-29 12:34:56.5+00` →
 * `2024-02-29T12:34:56.5+00:00` (the session's TimeZone is UTC, so the offset is +00).
 */
export function isoOf(text: string, kind: DateKind): string {
  if (kind === 'date') return text;
  const space = text.indexOf(' ');
  if (space < 0) return text; // infinity, -infinity
  let out = `${text.slice(0, space)}T${text.slice(space + 1)}`;
  if (kind === 'timestamptz') out = out.replace(/([+-][0-9]{2})( BC)?$/, '$1:00$2');
  return out;
}
