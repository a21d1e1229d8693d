import { describe, expect, it } from 'vitest';
import { StaleRefusals } from '../../src/gateway/verdict.js';

describe('StaleRefusals', () => {
  it('answers the same token on a lock with the same refusal, rendered once', () => {
    const r = new StaleRefusals();
    const a = r.of('doc:1', 5n, 9n);
    expect(a).toMatchObject({ ok: false, reason: 'stale', lock: 'doc:1', token: 5n, highest: 9n });
    expect(r.of('doc:1', 5n, 9n)).toBe(a);
    if (a.ok) throw new Error('a refusal');
    expect(a.problem.json()).toBe(a.problem.json());
    expect(JSON.parse(a.problem.json())).toEqual({
      ...a.problem.toBody(),
      token: '5',
      highest: '9',
    });
    expect(a.problem.json()).toContain('token 5 is older than 9, already admitted for lock \\"doc:1\\"');
  });

  it('makes a new refusal for another token, another highest or another lock', () => {
    const r = new StaleRefusals();
    const a = r.of('doc:1', 5n, 9n);
    const b = r.of('doc:1', 5n, 10n);
    expect(b).not.toBe(a);
    expect(b).toMatchObject({ token: 5n, highest: 10n });
    expect(r.of('doc:1', 6n, 10n)).toMatchObject({ token: 6n, highest: 10n });
    expect(r.of('doc:2', 6n, 10n)).toMatchObject({ lock: 'doc:2' });
    const floor = r.of('doc:3', 4n, null);
    expect(floor).toMatchObject({ token: 4n, highest: null });
    if (floor.ok) throw new Error('a refusal');
    expect(floor.problem.message).toContain('at or below the current epoch floor');
  });

  it('keeps at most `capacity` locks, forgetting the one whose refusal was made longest ago', () => {
    const r = new StaleRefusals(2);
    const a = r.of('a', 1n, 2n);
    const b = r.of('b', 1n, 2n);
    expect(r.of('a', 1n, 2n)).toBe(a);
    r.of('a', 2n, 3n); // a's refusal is made again: b's is now the oldest
    r.of('c', 1n, 2n); // forgets b
    expect(r.of('b', 1n, 2n)).not.toBe(b); // made again, forgetting a
    const c = r.of('c', 1n, 2n);
    expect(r.of('c', 1n, 2n)).toBe(c);
    expect(() => new StaleRefusals(0)).toThrow(RangeError);
  });
});
