/**
 * Properties of the token codec (src/tokens.ts): every token in 1 … 2^63−1
 * round-trips through its canonical decimal form; every other input is refused
 * with a reason, never thrown on; the padded form sorts like the numbers.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  compareTokens,
  formatToken,
  MAX_TOKEN,
  MIN_TOKEN,
  padToken,
  parseToken,
  TOKEN_WIDTH,
} from '../../src/tokens.js';

const RUNS = { numRuns: 400 };

/** Tokens, with the edges doubles get wrong drawn often. */
const tokenArb: fc.Arbitrary<bigint> = fc.oneof(
  { weight: 4, arbitrary: fc.bigInt({ min: MIN_TOKEN, max: MAX_TOKEN }) },
  { weight: 1, arbitrary: fc.bigInt({ min: 1n, max: 1000n }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      1n,
      2n ** 53n - 1n,
      2n ** 53n,
      2n ** 53n + 1n,
      10n ** 18n,
      MAX_TOKEN - 1n,
      MAX_TOKEN,
    ),
  },
);

/** The contract, written independently of the implementation. */
function isCanonical(s: string): boolean {
  return /^[1-9][0-9]*$/.test(s) && s.length <= 19 && BigInt(s) <= MAX_TOKEN;
}

function expectRefused(input: unknown): void {
  const result = parseToken(input);
  expect(result.ok, `accepted ${fc.stringify(input)}`).toBe(false);
  if (!result.ok) expect(result.reason.length).toBeGreaterThan(0);
}

const WHITESPACE = [' ', '\t', '\n', '\r', '\v', '\f', '\u00a0', '\u2003', '\u2028', '\ufeff', '\u200b'];
/** Digits of other scripts, which \d or Number() may accept: Arabic-Indic, Devanagari, fullwidth, math bold. */
const UNICODE_ZEROS = [0x0660, 0x06f0, 0x0966, 0xff10, 0x1d7ce];
const unicodeDigit = fc
  .tuple(fc.constantFrom(...UNICODE_ZEROS), fc.integer({ min: 0, max: 9 }))
  .map(([zero, d]) => String.fromCodePoint(zero + d));

describe('parseToken / formatToken', () => {
  it('round-trips every token in [1, 2^63−1]', () => {
    fc.assert(
      fc.property(tokenArb, (token) => {
        const text = formatToken(token);
        expect(text).toBe(token.toString(10));
        expect(parseToken(text)).toEqual({ ok: true, token });
      }),
      RUNS,
    );
  });

  it('agrees with the contract on arbitrary strings, and never throws', () => {
    const strings = fc.oneof(
      fc.string(),
      fc.string({ unit: 'binary' }),
      fc.string({ unit: fc.constantFrom(...'0123456789+-. e_x'.split('')), maxLength: 22 }),
    );
    fc.assert(
      fc.property(strings, (s) => {
        const result = parseToken(s);
        expect(result.ok).toBe(isCanonical(s));
        if (result.ok) expect(result.token).toBe(BigInt(s));
        else expect(result.reason.length).toBeGreaterThan(0);
      }),
      RUNS,
    );
  });

  it('refuses leading zeros', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5 }), fc.oneof(tokenArb, fc.constant(0n)), (zeros, n) => {
        expectRefused('0'.repeat(zeros) + n.toString());
      }),
      RUNS,
    );
  });

  it('refuses signs, decimal points, exponents and hex', () => {
    const decorated = fc
      .tuple(tokenArb, fc.constantFrom('+', '-', '−'), fc.constantFrom('', '.0', 'e0', 'n', '_0'))
      .map(([n, sign, suffix]) => [`${sign}${n}`, `${n}${suffix || '.'}`, `0x${n.toString(16)}`]);
    fc.assert(
      fc.property(decorated, (inputs) => {
        for (const input of inputs) expectRefused(input);
      }),
      RUNS,
    );
  });

  it('refuses whitespace anywhere', () => {
    fc.assert(
      fc.property(tokenArb, fc.constantFrom(...WHITESPACE), fc.nat(), (n, ws, at) => {
        const s = n.toString();
        const i = at % (s.length + 1);
        expectRefused(s.slice(0, i) + ws + s.slice(i));
      }),
      RUNS,
    );
  });

  it('refuses digits of other scripts in any position', () => {
    fc.assert(
      fc.property(tokenArb, unicodeDigit, fc.nat(), (n, digit, at) => {
        const s = n.toString();
        const i = at % s.length;
        expectRefused(s.slice(0, i) + digit + s.slice(i + 1));
      }),
      RUNS,
    );
  });

  it('refuses every value above 2^63−1, with the reason', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: MAX_TOKEN + 1n, max: 10n ** 40n }), (n) => {
        const result = parseToken(n.toString());
        expect(result).toEqual({ ok: false, reason: 'token exceeds 2^63-1' });
      }),
      RUNS,
    );
  });

  it('refuses non-strings (numbers, bigints, objects) without throwing', () => {
    fc.assert(
      fc.property(
        fc.anything().filter((v) => typeof v !== 'string'),
        (value) => expectRefused(value),
      ),
      RUNS,
    );
    expectRefused(42);
    expectRefused(42n);
    expectRefused(null);
  });

  it('formatToken refuses what is out of range, with a RangeError', () => {
    fc.assert(
      fc.property(fc.oneof(fc.bigInt({ max: 0n }), fc.bigInt({ min: MAX_TOKEN + 1n })), (n) => {
        expect(() => formatToken(n)).toThrow(RangeError);
      }),
      RUNS,
    );
  });
});

describe('padToken', () => {
  it('has a fixed width, and its string order is the numeric order', () => {
    fc.assert(
      fc.property(tokenArb, tokenArb, (a, b) => {
        const [pa, pb] = [padToken(a), padToken(b)];
        expect(pa).toHaveLength(TOKEN_WIDTH);
        expect(BigInt(pa)).toBe(a);
        const lexical = pa < pb ? -1 : pa > pb ? 1 : 0;
        expect(lexical).toBe(compareTokens(a, b));
      }),
      RUNS,
    );
  });

  it('sorting padded tokens sorts the tokens', () => {
    fc.assert(
      fc.property(fc.array(tokenArb, { maxLength: 50 }), (tokens) => {
        const byString = [...tokens].sort((x, y) =>
          padToken(x) < padToken(y) ? -1 : padToken(x) > padToken(y) ? 1 : 0,
        );
        const byNumber = [...tokens].sort(compareTokens);
        expect(byString).toEqual(byNumber);
      }),
      { numRuns: 100 },
    );
  });
});
