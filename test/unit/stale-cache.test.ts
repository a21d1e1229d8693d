import { describe, expect, it } from 'vitest';
import { StaleCache } from '../../src/gateway/stale-cache.js';

const admitted = (highest: bigint) => ({ ok: true as const, highest, lowerInflight: 0 });
const refused = (reason: 'stale' | 'forged' | 'lease-expired', highest: bigint | null) => ({
  ok: false as const,
  reason,
  highest,
});

describe('StaleCache', () => {
  it('knows nothing at first: every token goes to the store', () => {
    const c = new StaleCache();
    expect(c.refuses('a', 1n)).toBeNull();
  });

  it('refuses below the highest a recorded admission reported, never the highest itself', () => {
    const c = new StaleCache();
    c.learn('a', 42n, true, admitted(42n));
    expect(c.refuses('a', 41n)).toMatchObject({ highest: 42n });
    expect(c.refuses('a', 42n)).toBeNull();
    expect(c.refuses('a', 43n)).toBeNull();
    expect(c.refuses('b', 1n)).toBeNull();
  });

  it('learns nothing from a judge-only admission (shadow mode, resource kinds)', () => {
    const c = new StaleCache();
    c.learn('a', 42n, false, admitted(42n));
    expect(c.refuses('a', 41n)).toBeNull();
  });

  it('a stale refusal teaches the refused token and everything below, and the highest', () => {
    const c = new StaleCache();
    // Below an epoch floor: the store's highest (3) is below the token.
    c.learn('a', 10n, true, refused('stale', 3n));
    expect(c.refuses('a', 10n)).toMatchObject({ highest: 3n });
    expect(c.refuses('a', 11n)).toBeNull();
    c.learn('b', 10n, true, refused('stale', null));
    expect(c.refuses('b', 5n)).toMatchObject({ highest: null });
    // Below the highest: everything below the highest.
    c.learn('c', 5n, false, refused('stale', 9n));
    expect(c.refuses('c', 8n)).toMatchObject({ highest: 9n });
    expect(c.refuses('c', 9n)).toBeNull();
  });

  it('forged and lease refusals teach only the highest they report', () => {
    const c = new StaleCache();
    c.learn('a', 100n, true, refused('forged', 7n));
    expect(c.refuses('a', 6n)).toMatchObject({ highest: 7n });
    expect(c.refuses('a', 7n)).toBeNull();
    c.learn('b', 5n, true, refused('lease-expired', 5n));
    expect(c.refuses('b', 5n)).toBeNull();
    expect(c.refuses('b', 4n)).not.toBeNull();
    c.learn('c', 5n, true, refused('forged', null));
    expect(c.size).toBe(2);
  });

  it('only rises', () => {
    const c = new StaleCache();
    c.learn('a', 50n, true, admitted(50n));
    c.learn('a', 20n, true, refused('stale', 30n)); // an older answer arriving late
    expect(c.refuses('a', 49n)).toMatchObject({ highest: 50n });
    c.learn('a', 60n, true, admitted(60n));
    expect(c.refuses('a', 59n)).toMatchObject({ highest: 60n });
  });

  it('holds at most `capacity` locks, forgetting the least recently raised first', () => {
    const c = new StaleCache(3);
    for (const k of ['a', 'b', 'c']) c.learn(k, 10n, true, admitted(10n));
    c.learn('a', 11n, true, admitted(11n)); // raised: now the most recent
    c.learn('d', 10n, true, admitted(10n)); // evicts b
    expect(c.size).toBe(3);
    expect(c.refuses('b', 1n)).toBeNull();
    expect(c.refuses('a', 10n)).not.toBeNull();
    expect(c.refuses('c', 1n)).not.toBeNull();
    expect(c.refuses('d', 1n)).not.toBeNull();
    const none = new StaleCache(0);
    none.learn('a', 10n, true, admitted(10n));
    expect(none.refuses('a', 1n)).toBeNull();
    expect(() => new StaleCache(-1)).toThrow(RangeError);
  });
});
