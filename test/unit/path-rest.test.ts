import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  loadPolicies,
  matchPath,
  parsePathPattern,
  splitRequestPath,
  type PathPattern,
} from '../../src/policies.js';
import { inheritsNothing } from '../helpers/own-record.js';

function pattern(source: string): PathPattern {
  const parsed = parsePathPattern(source);
  if (!parsed.ok) throw new Error(parsed.reason);
  return parsed.pattern;
}

function segments(raw: string): string[] {
  const split = splitRequestPath(raw);
  if (!split.ok) throw new Error(split.reason);
  return split.segments;
}

describe('a final *name captures the rest of the path', () => {
  it.each([
    ['/invoices/*key', '/invoices', { key: '' }],
    ['/invoices/*key', '/invoices/', { key: '' }],
    ['/invoices/*key', '/invoices/a.pdf', { key: 'a.pdf' }],
    ['/invoices/*key', '/invoices/2024/03/a.pdf', { key: '2024/03/a.pdf' }],
    // decoded once: %2525 is the three characters "%25", not "%"
    ['/invoices/*key', '/invoices/a%20b/c%2525', { key: 'a b/c%25' }],
    ['/invoices/*key', '/invoices/caf%C3%A9', { key: 'café' }],
    // empty segments are dropped before matching, as everywhere
    ['/invoices/*key', '/invoices//a//b/', { key: 'a/b' }],
    ['/invoices/*key', '/invoicesx/a', null],
    ['/:bucket/*key', '/photos/2024/a.jpg', { bucket: 'photos', key: '2024/a.jpg' }],
    ['/:bucket/*key', '/photos', { bucket: 'photos', key: '' }],
    ['/:bucket/*key', '/', null],
    ['/*all', '/', { all: '' }],
    ['/*all', '/x/y', { all: 'x/y' }],
  ])('%s vs %s', (source, path, expected) => {
    const params = matchPath(pattern(source), segments(path));
    expect(params === null ? null : { ...params }).toEqual(expected);
  });

  it('bare * keeps its meaning: matches the rest, captures nothing', () => {
    const p = pattern('/orders/*');
    expect(p.params).toEqual([]);
    expect(p.rest ?? null).toBeNull();
    expect({ ...matchPath(p, segments('/orders/1/2')) }).toEqual({});
  });

  it('lists the capture among the parameters', () => {
    const p = pattern('/t/:tenant/*key');
    expect(p.params).toEqual(['tenant', 'key']);
    expect(p.rest).toBe('key');
    expect(p.wildcard).toBe(true);
  });

  it('a capture named like an Object member stays an own parameter, and nothing is inherited', () => {
    const params = matchPath(pattern('/x/*__proto__'), segments('/x/a/b'));
    expect(params).not.toBeNull();
    expect(inheritsNothing(params!)).toBe(true);
    expect(Object.hasOwn(params ?? {}, '__proto__')).toBe(true);
    expect(params?.['__proto__']).toBe('a/b');
    const other = matchPath(pattern('/y/:id'), segments('/y/1'))!;
    expect(other['constructor']).toBeUndefined();
    expect(other['toString']).toBeUndefined();
    expect('hasOwnProperty' in other).toBe(false);
  });

  it.each([
    ['/invoices/*key/x', 'only allowed as the last segment'],
    ['/invoices/*key/*', 'only allowed as the last segment'],
    ['/:key/*key', 'appears twice'],
    ['/invoices/*1key', 'characters not allowed'],
    ['/invoices/*k-ey', 'characters not allowed'],
    ['/invoices/**', 'characters not allowed'],
  ])('rejects %s', (source, reason) => {
    const parsed = parsePathPattern(source);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.reason).toContain(reason);
  });

  it('a lock template may use the capture', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fg-rest-'));
    writeFileSync(
      join(dir, 'p.yaml'),
      [
        'version: 1',
        'upstreams:',
        '  objects: { kind: http, url: "http://127.0.0.1:9" }',
        'routes:',
        '  - name: invoice-objects',
        '    methods: [PUT]',
        '    path: /invoices/*key',
        '    upstream: objects',
        "    lock: 'invoice:{key}'",
        '',
      ].join('\n'),
    );
    const loaded = await loadPolicies(dir);
    expect(loaded.ok).toBe(true);
    if (!loaded.ok) return;
    const match = loaded.policy.match('PUT', segments('/invoices/2024/a%20b.pdf'));
    expect(match?.params.key).toBe('2024/a b.pdf');
  });
});
