import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PROBLEMS, problemBody } from '../../src/errors.js';

const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
const documented = new Map(
  [...doc.matchAll(/^\|\s*`([a-z-]+)`\s*\|\s*(\d{3})\s*\|/gm)].map((m) => [m[1] as string, Number(m[2])]),
);

describe('problem catalogue', () => {
  it('every code in src/errors.ts is documented with the same status', () => {
    for (const [code, p] of Object.entries(PROBLEMS)) {
      expect(documented.get(code), `docs/errors.md lacks ${code}`).toBe(p.status);
    }
  });

  it('every documented code exists in src/errors.ts', () => {
    for (const code of documented.keys()) expect(Object.keys(PROBLEMS)).toContain(code);
  });

  it('builds RFC 9457 bodies with tokens as strings', () => {
    expect(problemBody('stale-token', 'old', { token: 41n, highest: 42n, skip: undefined })).toEqual({
      type: 'urn:fencegate:stale-token',
      title: PROBLEMS['stale-token'].title,
      status: 409,
      detail: 'old',
      token: '41',
      highest: '42',
    });
  });
});
