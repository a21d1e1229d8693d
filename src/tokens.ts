/**
 * Fencing tokens: unsigned 64-bit integers in 1 … 2^63−1, carried as `bigint` in
 * TypeScript and as canonical decimal strings (no sign, no leading zeros) on the
 * wire, in JSON and in stores. Never a JS number: doubles lose precision above 2^53.
 */
export type FencingToken = bigint;

export const MIN_TOKEN = 1n;
export const MAX_TOKEN = (1n << 63n) - 1n;
/** Width of a zero-padded token, used where tokens are compared as strings (Redis Lua). */
export const TOKEN_WIDTH = 19;

const CANONICAL = /^[1-9][0-9]{0,18}$/;

export type TokenParse = { ok: true; token: FencingToken } | { ok: false; reason: string };

/** Parses a canonical decimal token string. Anything else is refused with a reason. */
export function parseToken(input: unknown): TokenParse {
  if (typeof input !== 'string') return { ok: false, reason: 'token must be a decimal string' };
  if (input.length === 0) return { ok: false, reason: 'token is empty' };
  if (!CANONICAL.test(input)) {
    if (input === '0') return { ok: false, reason: 'token must be at least 1' };
    if (/^[+-]/.test(input)) return { ok: false, reason: 'token must not have a sign' };
    if (/^0[0-9]/.test(input)) return { ok: false, reason: 'token must not have leading zeros' };
    if (/^[0-9]+$/.test(input)) return { ok: false, reason: 'token exceeds 2^63-1' };
    return { ok: false, reason: 'token must contain only the digits 0-9' };
  }
  const token = BigInt(input);
  if (token > MAX_TOKEN) return { ok: false, reason: 'token exceeds 2^63-1' };
  return { ok: true, token };
}

/** Formats a token as its canonical decimal string. */
export function formatToken(token: FencingToken): string {
  if (token < MIN_TOKEN || token > MAX_TOKEN) throw new RangeError(`token out of range: ${token}`);
  return token.toString(10);
}

/** Zero-padded fixed-width form, whose lexical order equals numeric order. */
export function padToken(token: FencingToken): string {
  return token.toString(10).padStart(TOKEN_WIDTH, '0');
}

export function compareTokens(a: FencingToken, b: FencingToken): -1 | 0 | 1 {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * First token of a new epoch, derived from the store's clock: milliseconds × 1000.
 * See docs/adr/0002-epoch-floor.md for the assumption this rests on.
 */
export function epochFloor(storeTimeMs: number): FencingToken {
  return BigInt(Math.floor(storeTimeMs)) * 1000n;
}
