import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PROBLEMS, ProblemError, problemBody } from '../../src/errors.js';

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

describe('ProblemError.expected', () => {
  it('is the same problem as the constructor gives, without a stack trace, and leaves the stack limit as it was', () => {
    const limit = Error.stackTraceLimit;
    const a = ProblemError.expected('stale-token', 'token 5 is older than 7', { lock: 'k', token: 5n });
    const b = new ProblemError('stale-token', 'token 5 is older than 7', { lock: 'k', token: 5n });
    expect(a).toBeInstanceOf(ProblemError);
    expect([a.code, a.status, a.message, a.headers]).toEqual([b.code, b.status, b.message, b.headers]);
    expect(a.toBody()).toEqual(b.toBody());
    expect(a.stack?.split('\n').filter((l) => l.trim().startsWith('at '))).toEqual([]);
    expect(b.stack?.split('\n').some((l) => l.trim().startsWith('at '))).toBe(true);
    expect(Error.stackTraceLimit).toBe(limit);
  });
});

describe('ProblemError.jsonBytes', () => {
  it('is the byte length of the rendered body, not its length in characters', () => {
    const p = new ProblemError('stale-token', 'token 5 is older than 7 for lock "größe/☃"', {
      lock: 'größe/☃',
    });
    expect(p.jsonBytes()).toBe(Buffer.byteLength(p.json()));
    expect(p.jsonBytes()).toBeGreaterThan(p.json().length);
  });
});
