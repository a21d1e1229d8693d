/**
 * Properties of lock-key templates (src/policy/template.ts): parsing and rendering
 * never throw; a rendered key always obeys the 1–256 byte rule (or rendering
 * refuses, exactly when the key would break it); one-parameter templates are
 * injective, also through request-path decoding.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkLockKey, MAX_KEY_BYTES } from '../../src/lock-keys.js';
import {
  matchPath,
  parseLockTemplate,
  parsePathPattern,
  renderLock,
  splitRequestPath,
  type HeaderLookup,
  type LockTemplate,
} from '../../src/policy/index.js';

const RUNS = { numRuns: 300 };

/** Any string, including lone surrogates, controls and long ones. */
const anyValue = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 300 }),
  fc.string({
    unit: fc.constantFrom(
      'a',
      'é',
      '日',
      '😀',
      '\u0000',
      '\u007f',
      '\u0085',
      '\ud800',
      '\udc00',
      ':',
      '\ufffd',
    ),
    maxLength: 30,
  }),
);
const paramName = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,10}$/).filter((n) => n !== '__proto__');
const textPart = fc.string({
  unit: fc.constantFrom(...'abcXYZ019:-_./@ é'.split('')),
  minLength: 1,
  maxLength: 12,
});

/** A template source with text around `names` (one placeholder each) and its parse. */
function templateOf(names: string[], texts: string[]): { source: string; template: LockTemplate } {
  let source = texts[0] ?? '';
  names.forEach((n, i) => (source += `{${n}}${texts[i + 1] ?? ''}`));
  const parsed = parseLockTemplate(source);
  if (!parsed.ok) throw new Error(`generated template ${JSON.stringify(source)} refused: ${parsed.reason}`);
  return { source, template: parsed.template };
}

const noHeaders: HeaderLookup = (name) => ({ ok: false, reason: `header "${name}" is missing` });

/** What the key must be: the template with each placeholder replaced by its value. */
function expected(template: LockTemplate, params: Record<string, string>): string {
  return template.parts
    .map((p) => (p.kind === 'text' ? p.value : p.kind === 'param' ? (params[p.name] ?? '') : ''))
    .join('');
}

describe('parseLockTemplate', () => {
  it('never throws, and every refusal has a reason', () => {
    const sources = fc.oneof(
      fc.string({ maxLength: 300 }),
      fc.string({ unit: fc.constantFrom('{', '}', 'a', ':', '.', ' ', 'header', '\u0000'), maxLength: 40 }),
    );
    fc.assert(
      fc.property(sources, (source) => {
        const parsed = parseLockTemplate(source);
        if (!parsed.ok) expect(parsed.reason.length).toBeGreaterThan(0);
        else expect(parsed.template.source).toBe(source);
      }),
      RUNS,
    );
  });

  it('accepts generated templates and keeps their parts in order', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(paramName, { minLength: 1, maxLength: 3 }),
        fc.array(textPart, { minLength: 4, maxLength: 4 }),
        (names, texts) => {
          const { template } = templateOf(names, texts);
          const params = template.parts.flatMap((p) => (p.kind === 'param' ? [p.name] : []));
          expect(params).toEqual(names);
        },
      ),
      RUNS,
    );
  });
});

describe('renderLock', () => {
  it('never throws; a key it renders obeys the key rules, and it refuses exactly the keys that do not', () => {
    const params = fc.uniqueArray(paramName, { minLength: 1, maxLength: 3 });
    fc.assert(
      fc.property(
        params,
        fc.array(textPart, { minLength: 4, maxLength: 4 }),
        fc.array(anyValue, { minLength: 3, maxLength: 3 }),
        (names, texts, values) => {
          const { template } = templateOf(names, texts);
          const bound = Object.fromEntries(names.map((n, i) => [n, values[i] ?? '']));
          const rendered = renderLock(template, bound, noHeaders);
          const want = expected(template, bound);
          expect(rendered.ok).toBe(checkLockKey(want).ok);
          if (rendered.ok) {
            expect(rendered.key).toBe(want);
            expect(Buffer.byteLength(rendered.key, 'utf8')).toBeLessThanOrEqual(MAX_KEY_BYTES);
            expect(rendered.key.length).toBeGreaterThan(0);
          } else {
            expect(rendered.reason.length).toBeGreaterThan(0);
          }
        },
      ),
      RUNS,
    );
  });

  it('header placeholders: a missing or repeated header is a refusal, never a key', () => {
    const { template } = templateOf(['orderId'], ['tenant:', ':order:']);
    const withHeader = parseLockTemplate('tenant:{header.X-Tenant}:order:{orderId}');
    if (!withHeader.ok) throw new Error(withHeader.reason);
    fc.assert(
      fc.property(anyValue, fc.constantFrom('missing', 'repeated', 'present'), (value, mode) => {
        const lookup: HeaderLookup = (name) =>
          mode === 'present' ? { ok: true, value } : { ok: false, reason: `header "${name}" is ${mode}` };
        const rendered = renderLock(withHeader.template, { orderId: '42' }, lookup);
        if (mode !== 'present')
          expect(rendered).toEqual({ ok: false, reason: 'header "x-tenant" is ' + mode });
        else expect(rendered.ok).toBe(checkLockKey(`tenant:${value}:order:42`).ok);
        expect(renderLock(template, { orderId: value }, noHeaders).ok).toBe(
          checkLockKey(`tenant:${value}:order:`).ok,
        );
      }),
      RUNS,
    );
  });

  it('a missing path parameter is a refusal', () => {
    const { template } = templateOf(['orderId'], ['order:']);
    expect(renderLock(template, {}, noHeaders)).toEqual({
      ok: false,
      reason: 'path parameter "orderId" is missing',
    });
  });

  it('one-parameter templates are injective: distinct values, distinct keys', () => {
    fc.assert(
      fc.property(paramName, textPart, textPart, anyValue, anyValue, (name, prefix, suffix, a, b) => {
        fc.pre(a !== b);
        const { template } = templateOf([name], [prefix, suffix]);
        const ra = renderLock(template, { [name]: a }, noHeaders);
        const rb = renderLock(template, { [name]: b }, noHeaders);
        if (ra.ok && rb.ok) expect(ra.key).not.toBe(rb.key);
      }),
      RUNS,
    );
  });

  it('KNOWN: templates with two placeholders are not injective (values may contain the separator)', () => {
    const { template } = templateOf(['tenant', 'orderId'], ['tenant:', ':order:']);
    const a = renderLock(template, { tenant: 'a', orderId: 'b:order:c' }, noHeaders);
    const b = renderLock(template, { tenant: 'a:order:b', orderId: 'c' }, noHeaders);
    expect(a).toEqual(b); // two different resources share one lock: safe, but not isolated
  });
});

describe('lock keys from request paths', () => {
  const pattern = parsePathPattern('/orders/:orderId');
  const template = templateOf(['orderId'], ['order:']).template;

  /** The gateway's path → params → key, for a raw (percent-encoded) segment. */
  function keyFor(rawSegment: string): { ok: true; key: string } | { ok: false } {
    if (!pattern.ok) throw new Error(pattern.reason);
    const split = splitRequestPath(`/orders/${rawSegment}`);
    if (!split.ok) return { ok: false };
    const params = matchPath(pattern.pattern, split.segments);
    if (params === null) return { ok: false };
    return renderLock(template, params, noHeaders);
  }

  it('never throws; distinct decoded ids give distinct keys, and equal ones the same key', () => {
    fc.assert(
      fc.property(anyValue, anyValue, fc.boolean(), (a, b, encodeAll) => {
        const enc = (s: string) => (encodeAll ? [...s].map(safeEncode).join('') : safeEncode(s));
        const ka = keyFor(enc(a));
        const kb = keyFor(enc(b));
        if (ka.ok && kb.ok) expect(ka.key === kb.key).toBe(a === b);
        if (ka.ok) expect(checkLockKey(ka.key).ok).toBe(true);
      }),
      RUNS,
    );
  });

  // Once a bug: matchPath assigned params['__proto__'] on a plain object, which was ignored, so
  // renderLock read Object.prototype and every order shared the lock "order:[object Object]".
  it('a path parameter named __proto__ renders the id, not "[object Object]"', () => {
    const proto = parsePathPattern('/orders/:__proto__');
    const t = parseLockTemplate('order:{__proto__}');
    if (!proto.ok || !t.ok) throw new Error('setup');
    const params = matchPath(proto.pattern, ['orders', '42']) ?? {};
    expect(renderLock(t.template, params, noHeaders)).toEqual({ ok: true, key: 'order:42' });
  });
});

/** encodeURIComponent, except for lone surrogates it cannot encode (sent as-is, refused by the path rules or the key rules). */
function safeEncode(s: string): string {
  try {
    return encodeURIComponent(s);
  } catch {
    return s;
  }
}
