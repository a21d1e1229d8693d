/**
 * Regression tests for src/policy: YAML that is not plain JSON (tags, aliases, odd
 * keys) is refused where it is written, never silently turned into something weaker;
 * user-chosen names (path parameters, upstreams) never reach Object.prototype.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  formatPolicyError,
  loadPolicies,
  parsePolicyText,
  type LoadResult,
  type PolicyError,
} from '../../src/policies.js';
import { inheritsNothing } from '../helpers/own-record.js';

let dir = '';
let n = 0;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fg-policy-json-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function load(lines: string[]): Promise<{ file: string; result: LoadResult }> {
  n += 1;
  const file = join(dir, `p${n}.yaml`);
  await writeFile(file, lines.join('\n'));
  return { file, result: await loadPolicies(file) };
}

async function errorsOf(lines: string[], fileLevel = true): Promise<{ file: string; errors: PolicyError[] }> {
  const { file, result } = await load(lines);
  if (result.ok) throw new Error(`unexpectedly loaded:\n${lines.join('\n')}`);
  for (const e of result.errors) {
    expect(e.file).toBe(file);
    expect(e.line).toBeGreaterThanOrEqual(1);
    expect(e.column).toBeGreaterThanOrEqual(1);
  }
  // parsePolicyText (one file, before the cross-file checks) agrees and never throws.
  const direct = parsePolicyText(file, lines.join('\n'));
  expect(direct.ok).toBe(!fileLevel);
  return { file, errors: result.errors };
}

const HEAD = [
  'version: 1',
  'upstreams:',
  '  orders: { kind: http, url: "http://127.0.0.1:9000" }',
  'routes:',
];
const ROUTE = ['  - name: w', '    methods: [PUT]', '    path: /orders/:id', '    upstream: orders'];

describe('values that are not plain JSON are refused at their position', () => {
  it.each([
    [
      '!!set fencing block',
      ['    lock: "order:{id}"', '    fencing: !!set { check }'],
      10,
      14,
      'routes[0].fencing',
      '!!set',
    ],
    [
      '!!omap fencing block',
      ['    lock: "order:{id}"', '    fencing: !!omap', '      - check: lease'],
      10,
      14,
      'routes[0].fencing',
      '!!omap',
    ],
    [
      '!!pairs fencing block',
      ['    lock: "order:{id}"', '    fencing: !!pairs [ check: lease ]'],
      10,
      14,
      'routes[0].fencing',
      '!!pairs',
    ],
    ['!!binary lock', ['    lock: !!binary b3JkZXI='], 9, 11, 'routes[0].lock', '!!binary'],
    ['!!timestamp lock', ['    lock: !!timestamp 2001-12-14'], 9, 11, 'routes[0].lock', '!!timestamp'],
    ['a local tag', ['    lock: !lock "order:{id}"'], 9, 11, 'routes[0].lock', '!lock'],
  ])('%s', async (_name, extra, line, column, field, fragment) => {
    const { errors } = await errorsOf([...HEAD, ...ROUTE, ...extra]);
    expect(errors[0]).toMatchObject({ line, column, field });
    expect(errors[0]?.message).toContain(fragment);
  });

  it('a tag that does not resolve (!!float on text) is refused, not read as a string', async () => {
    const { errors } = await errorsOf([
      ...HEAD,
      ...ROUTE,
      '    lock: "order:{id}"',
      '    fencing: { drainTimeoutMs: !!float soon }',
    ]);
    expect(errors[0]).toMatchObject({ line: 10 });
  });

  it('.inf and .nan are refused (not JSON numbers)', async () => {
    const { errors } = await errorsOf([
      'version: 1',
      'upstreams:',
      '  orders: { kind: http, url: "http://x", timeoutMs: .inf }',
    ]);
    expect(errors[0]).toMatchObject({ line: 3, field: 'upstreams.orders.timeoutMs' });
  });

  it('mapping keys must be plain strings', async () => {
    const { errors } = await errorsOf([
      'version: 1',
      'upstreams:',
      '  ? [a, b]',
      '  : { kind: http, url: "http://x" }',
    ]);
    expect(errors[0]).toMatchObject({ line: 3, column: 5, field: 'upstreams' });
    expect(errors[0]?.message).toMatch(/keys must be plain strings/);
  });

  it.each([
    ['a tagged key', '!!binary aGk=: x'],
    ['a set as key', '? !!set {a}\n: x'],
    ['an alias as key', 'a: &k name\n*k : x'],
    ['an anchored bomb as key', 'a: &a [x, x]\n? [*a, *a]\n: x'],
    ['a tag on the document', '!!omap\n- version: 1'],
    ['an empty tagged value', 'version: !!set'],
    ['binary as version', 'version: !!binary AQ=='],
    ['a timestamp key', '2001-12-14: x'],
  ])('never throws and always locates: %s', (_name, text) => {
    const parsed = parsePolicyText('x.yaml', text);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) {
      for (const e of parsed.errors) {
        expect(e.line, JSON.stringify(e)).toBeGreaterThanOrEqual(1);
        expect(e.column, JSON.stringify(e)).toBeGreaterThanOrEqual(1);
        expect(e.message.length).toBeGreaterThan(0);
      }
    }
  });

  it('core tags that keep values plain JSON are fine (!!str, !!int, !!map, !!seq)', async () => {
    const { result } = await load([
      'version: !!int 1',
      'upstreams: !!map',
      '  orders: { kind: !!str http, url: "http://127.0.0.1:9000", timeoutMs: !!int 1000 }',
      'routes: !!seq',
      ...ROUTE,
    ]);
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    expect(result.policy.upstreams.orders?.timeoutMs).toBe(1000);
  });
});

describe('aliases', () => {
  it('an alias with no anchor is an error at the alias, in loadPolicies and parsePolicyText', async () => {
    const lines = [...HEAD, '  - name: w', '    methods: [*GET]', '    path: /a', '    upstream: orders'];
    const { file, errors } = await errorsOf(lines);
    expect(errors[0]).toMatchObject({ file, line: 6, column: 15, field: 'routes[0].methods[0]' });
    expect(errors[0]?.message).toMatch(/alias "\*GET" has no anchor/);
  });

  it('an alias inside the node it names (a cycle) is refused', async () => {
    const { errors } = await errorsOf([...HEAD, '  - &r [*r]']);
    expect(errors[0]).toMatchObject({ line: 5, field: 'routes[0][0]' });
  });

  it('an alias bomb is refused at the first alias, without expanding it', async () => {
    const lines = ['version: 1', 'a: &a [x, x, x, x, x, x, x, x, x, x]'];
    for (let i = 0; i < 8; i++)
      lines.push(
        `b${i}: &b${i} [${Array(10)
          .fill(i === 0 ? '*a' : `*b${i - 1}`)
          .join(', ')}]`,
      );
    const { errors } = await errorsOf(lines);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ line: 3, column: 10, field: 'b0[0]' });
    expect(errors[0]?.message).toMatch(/alias/);
  });

  it('ordinary anchors and aliases still work', async () => {
    const { result } = await load([
      ...HEAD,
      '  - name: w',
      '    methods: &writes [PUT, DELETE]',
      '    path: /a/:id',
      '    upstream: orders',
      '    lock: "a:{id}"',
      '    fencing: &strict { check: lease }',
      '  - name: v',
      '    methods: *writes',
      '    path: /b/:id',
      '    upstream: orders',
      '    lock: "b:{id}"',
      '    fencing: *strict',
    ]);
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    expect(result.policy.routes.map((r) => r.fencing?.check)).toEqual(['lease', 'lease']);
    expect(result.policy.routes[1]?.methods).toEqual(['PUT', 'DELETE']);
  });
});

describe('user-chosen names never reach Object.prototype', () => {
  it('a path parameter named __proto__ (or constructor) renders its value into the lock', async () => {
    const { result } = await load([
      ...HEAD,
      '  - name: a',
      '    methods: [PUT]',
      '    path: /orders/:__proto__',
      '    upstream: orders',
      '    lock: "order:{__proto__}"',
      '  - name: b',
      '    methods: [PUT]',
      '    path: /items/:constructor',
      '    upstream: orders',
      '    lock: "item:{constructor}"',
    ]);
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    const { renderLock } = await import('../../src/policies.js');
    const none = () => ({ ok: false as const, reason: 'none' });
    const a = result.policy.match('PUT', ['orders', '42']);
    const b = result.policy.match('PUT', ['orders', '43']);
    const c = result.policy.match('PUT', ['items', '7']);
    if (a?.route.lock == null || b?.route.lock == null || c?.route.lock == null) throw new Error('no match');
    expect(renderLock(a.route.lock, a.params, none)).toEqual({ ok: true, key: 'order:42' });
    expect(renderLock(b.route.lock, b.params, none)).toEqual({ ok: true, key: 'order:43' });
    expect(renderLock(c.route.lock, c.params, none)).toEqual({ ok: true, key: 'item:7' });
    expect(inheritsNothing(a.params)).toBe(true);
  });

  it('a lock naming an undeclared parameter is refused even if Object.prototype has it', async () => {
    const { errors } = await errorsOf([...HEAD, ...ROUTE, '    lock: "order:{constructor}"'], false);
    expect(errors[0]).toMatchObject({ line: 9, field: 'routes[0].lock' });
  });

  it('upstreams named like Object.prototype members are ordinary names', async () => {
    const { errors } = await errorsOf(
      [
        'version: 1',
        'upstreams:',
        '  constructor: { kind: http, url: "http://127.0.0.1:9000" }',
        'routes:',
        '  - { name: a, methods: [GET], path: /a, upstream: constructor }',
        '  - { name: b, methods: [GET], path: /b, upstream: toString }',
      ],
      false,
    );
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ line: 6, field: 'routes[1].upstream' });
    expect(errors[0]?.message).toMatch(/unknown upstream "toString"/);
  });
});
