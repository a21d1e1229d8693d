import { describe, expect, it } from 'vitest';
import { MAX_TOKEN, epochFloor, formatToken, padToken, parseToken } from '../../src/tokens.js';

describe('tokens', () => {
  it.each([
    ['1', 1n],
    ['42', 42n],
    ['9007199254740993', 9007199254740993n],
    ['9223372036854775807', MAX_TOKEN],
  ])('parses %s exactly', (s, v) => {
    expect(parseToken(s)).toEqual({ ok: true, token: v });
    expect(formatToken(v)).toBe(s);
  });

  it.each([
    '',
    '0',
    '-1',
    '+1',
    '01',
    '1.0',
    '1e3',
    ' 1',
    '1 ',
    '0x10',
    '9223372036854775808',
    '99999999999999999999',
    '١',
  ])('refuses %j', (s) => {
    expect(parseToken(s).ok).toBe(false);
  });

  it('refuses non-strings', () => {
    expect(parseToken(42).ok).toBe(false);
    expect(parseToken(undefined).ok).toBe(false);
  });

  it('pads so that string order is numeric order', () => {
    const a = padToken(9n);
    const b = padToken(10n);
    expect(a < b).toBe(true);
    expect(padToken(MAX_TOKEN)).toHaveLength(19);
  });

  it('derives the epoch floor from milliseconds', () => {
    expect(epochFloor(1_700_000_000_123)).toBe(1_700_000_000_123_000n);
  });
});
