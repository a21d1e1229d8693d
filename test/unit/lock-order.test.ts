/** The canonical lock order (UTF-8 byte order) and an owner's holds, as the issuer judges ordering violations. */
import { describe, expect, it } from 'vitest';
import { canonicalOrder, compareKeys, OwnerHolds } from '../../src/issuer/order.js';

describe('canonical lock order', () => {
  it('is the byte order of the UTF-8 key, not UTF-16 or the locale', () => {
    // U+FF5E (3 UTF-8 bytes, EF BD 9E) sorts before U+1F600 (4 bytes, F0 …) in bytes,
    // after it in UTF-16 code units (0xFF5E > 0xD83D).
    expect(canonicalOrder(['😀', '～', 'é', 'a', 'B'])).toEqual(['B', 'a', 'é', '～', '😀']);
    expect(compareKeys('a', 'a')).toBe(0);
    expect(compareKeys('acct:10', 'acct:9')).toBeLessThan(0);
  });
});

describe('OwnerHolds', () => {
  const far = Number.MAX_SAFE_INTEGER;
  it('names the highest live key held after the one asked for; none for in order, a retry, or another owner', () => {
    const h = new OwnerHolds();
    h.add('w', 'g1', { key: 'b', expiresAt: far });
    h.add('w', 'g2', { key: 'd', expiresAt: far });
    expect(h.violatedBy('w', 'a', 0)).toBe('d');
    expect(h.violatedBy('w', 'c', 0)).toBe('d');
    expect(h.violatedBy('w', 'e', 0)).toBeNull();
    expect(h.violatedBy('w', 'b', 0)).toBeNull(); // holds it: a retry
    expect(h.violatedBy('other', 'a', 0)).toBeNull();
    h.remove('w', 'g2');
    expect(h.violatedBy('w', 'a', 0)).toBe('b');
    expect(h.violatedBy('w', 'c', 0)).toBeNull();
    h.remove('w', 'g1');
    expect(h.owners).toBe(0);
  });

  it('leaves out holds past their expiry', () => {
    const h = new OwnerHolds();
    h.add('w', 'g1', { key: 'b', expiresAt: 100 });
    h.add('w', 'g2', { key: 'z', expiresAt: 50 });
    expect(h.violatedBy('w', 'a', 10)).toBe('z');
    expect(h.violatedBy('w', 'a', 60)).toBe('b');
    expect(h.violatedBy('w', 'a', 100)).toBeNull();
  });
});
