import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  loadPolicies,
  matchPath,
  parseLockTemplate,
  parsePathPattern,
  renderLock,
  splitRequestPath,
  type HeaderLookup,
  type PathPattern,
} from '../../src/policies.js';

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

describe('path patterns', () => {
  it.each([
    ['/orders/:orderId', '/orders/42', { orderId: '42' }],
    ['/orders/:orderId', '/orders/42/', { orderId: '42' }],
    ['/orders/:orderId', '//orders//42', { orderId: '42' }],
    ['/orders/:orderId', '/%6Frders/a%20b', { orderId: 'a b' }],
    ['/orders/:orderId', '/orders', null],
    ['/orders/:orderId', '/orders/42/items', null],
    ['/orders/*', '/orders', {}],
    ['/orders/*', '/orders/42/items/7', {}],
    ['/orders/*', '/ordersx/1', null],
    ['/t/:tenant/items/:id', '/t/acme/items/7', { tenant: 'acme', id: '7' }],
    ['/', '/', {}],
    ['/', '/x', null],
    ['/*', '/anything/at/all', {}],
  ])('%s vs %s', (source, path, expected) => {
    expect(matchPath(pattern(source), segments(path))).toEqual(expected);
  });

  it.each([
    ['orders', 'must start with "/"'],
    ['/orders/', 'must not end with "/"'],
    ['/orders//x', 'empty segments'],
    ['/orders/*/items', 'only allowed as the last segment'],
    ['/orders/:id/:id', 'appears twice'],
    ['/orders/file.:ext', 'characters not allowed'],
    ['/orders/:', 'invalid parameter'],
    ['/orders/../admin', 'must not contain "." or ".."'],
    ['/orders?x=1', 'characters not allowed'],
    ['/orders/a*', 'characters not allowed'],
  ])('rejects %s', (source, reason) => {
    const parsed = parsePathPattern(source);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.reason).toContain(reason);
  });

  it.each([
    '/orders/%2e%2e/admin',
    '/orders/./x',
    '/orders/a%2Fb',
    '/orders/a%5Cb',
    '/orders/%00',
    '/orders/%zz',
    'orders',
  ])('refuses the ambiguous request path %s', (raw) => {
    expect(splitRequestPath(raw).ok).toBe(false);
  });

  it('splits every path as the rules say: the same segments, or the same refusal', () => {
    // The rules written plainly (a pattern for the raw characters, `split`, then each
    // segment decoded and checked); splitRequestPath does it in one pass.
    const byTheRules = (raw: string): ReturnType<typeof splitRequestPath> => {
      if (!raw.startsWith('/')) return { ok: false, reason: 'path must start with "/"' };
      if (!/^[A-Za-z0-9\-._~!$&'()*+,;=:@%/]*$/.test(raw))
        return { ok: false, reason: 'path has characters that must be percent-encoded (such as "#")' };
      const out: string[] = [];
      const parts = raw.split('/');
      for (let i = 0; i < parts.length; i++) {
        const part = parts[i]!;
        if (part === '') continue;
        let decoded = part;
        if (part.includes('%')) {
          try {
            decoded = decodeURIComponent(part);
          } catch {
            return { ok: false, reason: 'path has invalid percent-encoding' };
          }
          if (/[/\\\0]/.test(decoded))
            return { ok: false, reason: 'path segments must not encode "/", "\\" or NUL' };
        }
        if (decoded === '.' || decoded === '..')
          return { ok: false, reason: 'path must not contain dot segments' };
        if (decoded.startsWith('..') || (decoded.endsWith('..') && i < parts.length - 1))
          return { ok: false, reason: 'path has ".." at the edge of a segment' };
        out.push(decoded);
      }
      return { ok: true, segments: out };
    };
    const pieces = [
      '/',
      '/',
      'a',
      'orders',
      '.',
      '..',
      '%2e',
      '%2F',
      '%5c',
      '%00',
      '%41',
      '%zz',
      '%',
      '#',
      ' ',
      'é',
      '~',
      ':',
      '?',
    ];
    fc.assert(
      fc.property(fc.boolean(), fc.array(fc.constantFrom(...pieces), { maxLength: 8 }), (rooted, parts) => {
        const raw = (rooted ? '/' : '') + parts.join('');
        expect(splitRequestPath(raw), raw).toEqual(byTheRules(raw));
      }),
      { numRuns: 20_000 },
    );
  });
});

describe('lock templates', () => {
  const headers =
    (values: Record<string, string | string[]>): HeaderLookup =>
    (name) => {
      const v = values[name];
      if (v === undefined) return { ok: false, reason: `header ${name} missing` };
      if (Array.isArray(v)) return { ok: false, reason: `header ${name} repeated` };
      return { ok: true, value: v };
    };

  it('renders path parameters and headers', () => {
    const parsed = parseLockTemplate('t:{header.X-Tenant}:order:{ orderId }');
    if (!parsed.ok) throw new Error(parsed.reason);
    expect(renderLock(parsed.template, { orderId: '42' }, headers({ 'x-tenant': 'acme' }))).toEqual({
      ok: true,
      key: 't:acme:order:42',
    });
    expect(renderLock(parsed.template, { orderId: '42' }, headers({}))).toEqual({
      ok: false,
      reason: 'header x-tenant missing',
    });
  });

  it('a template without placeholders is one global lock', () => {
    const parsed = parseLockTemplate('singleton');
    expect(parsed.ok && renderLock(parsed.template, {}, headers({}))).toEqual({ ok: true, key: 'singleton' });
  });

  it('refuses rendered keys that are not valid lock keys', () => {
    const parsed = parseLockTemplate('{id}');
    if (!parsed.ok) throw new Error(parsed.reason);
    expect(renderLock(parsed.template, { id: 'a\u0001b' }, headers({})).ok).toBe(false);
    expect(renderLock(parsed.template, { id: 'x'.repeat(300) }, headers({})).ok).toBe(false);
  });

  it.each([
    ['order:{orderId', 'unclosed "{"'],
    ['order:}', 'unmatched "}"'],
    ['order:{}', 'empty placeholder'],
    ['order:{a-b}', 'invalid placeholder'],
    ['order:{header.}', 'invalid header name'],
    ['{header.connection}', '"connection" header'],
    ['{header.x-fencegate-route}', '"x-fencegate-route" header'],
    ['order:\u0007{id}', 'control characters'],
  ])('rejects %s', (source, reason) => {
    const parsed = parseLockTemplate(source);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.reason).toContain(reason);
  });
});

describe('route table', () => {
  it('first match wins, methods are part of the match', async () => {
    const result = await loadPolicies('test/fixtures/policies/valid');
    if (!result.ok) throw new Error('expected ok');
    const { policy } = result;
    expect(policy.match('PUT', ['orders', '42'])?.route.name).toBe('order-writes');
    expect(policy.match('PUT', ['orders', '42'])?.params).toEqual({ orderId: '42' });
    expect(policy.match('GET', ['orders', '42'])?.route.name).toBe('order-reads');
    expect(policy.match('PUT', ['orders', '42', 'items'])).toBeNull();
    expect(policy.match('OPTIONS', ['orders', '42'])).toBeNull();
    expect(policy.match('PUT', ['tenants', 'acme', 'items', '9'])?.route.name).toBe('tenant-items');
  });
});
