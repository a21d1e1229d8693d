import { describe, expect, it } from 'vitest';
import { MAX_NAMED, StatementNames } from '../../src/gateway/kinds/postgres/prepared.js';

describe('postgres kind: statement names', () => {
  it('names each distinct text once, never two texts alike', () => {
    const names = new StatementNames(true);
    const a = names.of('SELECT 1', 1);
    const b = names.of('SELECT 2', 1);
    expect(a).toBeDefined();
    expect(b).toBeDefined();
    expect(a).not.toBe(b);
    // A text built again (another string object) gets its first name.
    expect(names.of(['SELECT', '1'].join(' '), 1)).toBe(a);
    expect(names.size).toBe(2);
    // The same text for another generation of its table's columns: another name.
    const again = names.of('SELECT 1', 2);
    expect(again).toBeDefined();
    expect(again).not.toBe(a);
    expect(names.of('SELECT 1', 2)).toBe(again);
  });

  it(`names at most ${MAX_NAMED} texts; later ones run unnamed, earlier ones keep their names`, () => {
    const names = new StatementNames(true);
    const given = Array.from({ length: MAX_NAMED }, (_, i) => names.of(`SELECT ${i}`, 1));
    expect(new Set(given).size).toBe(MAX_NAMED);
    expect(given.every((n) => n !== undefined)).toBe(true);
    expect(names.of(`SELECT ${MAX_NAMED}`, 1)).toBeUndefined();
    expect(names.of('SELECT 0', 1)).toBe(given[0]);
    expect(names.size).toBe(MAX_NAMED);
  });

  it('off: every statement runs unnamed', () => {
    const names = new StatementNames(false);
    expect(names.of('SELECT 1', 1)).toBeUndefined();
    expect(names.size).toBe(0);
  });
});
