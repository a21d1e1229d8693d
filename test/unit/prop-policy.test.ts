/**
 * Properties of policy loading (src/policy/load.ts): on random YAML-ish text and on
 * random mutations of a valid policy, loadPolicies never throws and answers either
 * a policy or errors that each name the file, a line ≥ 1 and a field; generated
 * valid policies load, as written.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { loadPolicies, parsePolicyText, type LoadResult } from '../../src/policies.js';
import { fieldName } from '../../src/policy/errors.js';
import { HTTP_METHODS } from '../../src/policies.js';

const RUNS = { numRuns: 120 };

let dir = '';
let n = 0;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fg-prop-policy-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Loads `text` as one policy file, the way `fencegate check` and `serve` do. */
async function load(text: string): Promise<{ file: string; result: LoadResult }> {
  n += 1;
  const file = join(dir, `p${n}.yaml`);
  await writeFile(file, text);
  return { file, result: await loadPolicies(file) };
}

/** Every error names this file, a line within it (≥ 1), a column ≥ 1, a field and a message. */
function expectLocatedErrors(file: string, text: string, result: LoadResult): void {
  if (result.ok) return;
  expect(result.errors.length).toBeGreaterThan(0);
  const lines = text.split(/\r\n|\r|\n/).length;
  for (const e of result.errors) {
    const where = JSON.stringify(e);
    expect(e.file, where).toBe(file);
    expect(Number.isInteger(e.line) && e.line >= 1 && e.line <= lines + 1, where).toBe(true);
    expect(Number.isInteger(e.column) && e.column >= 1, where).toBe(true);
    expect(typeof e.field, where).toBe('string');
    expect(e.message.length, where).toBeGreaterThan(0);
  }
}

describe('loadPolicies on generated valid policies', () => {
  it('loads them, with every route and lock as written', async () => {
    await fc.assert(
      fc.asyncProperty(policyArb, async (policy) => {
        const text = stringify(policy);
        const { result } = await load(text);
        if (!result.ok) expect.fail(`${text}\n${JSON.stringify(result.errors, null, 2)}`);
        expect(result.policy.routes.map((r) => r.name)).toEqual(policy.routes.map((r) => r.name));
        expect(result.policy.routes.map((r) => r.lock?.source ?? null)).toEqual(
          policy.routes.map((r) => r.lock ?? null),
        );
        expect(Object.keys(result.policy.upstreams).sort()).toEqual(Object.keys(policy.upstreams).sort());
        for (const [i, route] of result.policy.routes.entries()) {
          const raw = policy.routes[i];
          expect(route.fencing?.check ?? null).toBe(
            raw?.lock === undefined ? null : (raw.fencing?.check ?? 'token'),
          );
          expect(route.fencing?.enforce ?? null).toBe(
            raw?.lock === undefined ? null : (raw.fencing?.enforce ?? true),
          );
        }
      }),
      { numRuns: 80 },
    );
  });
});

describe('loadPolicies never throws, and every error is located', () => {
  it('on random YAML-ish text', async () => {
    await fc.assert(
      fc.asyncProperty(yamlishArb, async (text) => {
        const { file, result } = await load(text);
        expectLocatedErrors(file, text, result);
      }),
      RUNS,
    );
  });

  it('on arbitrary strings, parsePolicyText included', async () => {
    await fc.assert(
      fc.asyncProperty(fc.string({ unit: 'binary', maxLength: 200 }), async (text) => {
        const { file, result } = await load(text);
        expectLocatedErrors(file, text, result);
        const direct = parsePolicyText('direct.yaml', text);
        if (!direct.ok) for (const e of direct.errors) expect(e.line).toBeGreaterThanOrEqual(1);
      }),
      RUNS,
    );
  });

  it('on text mutations of a valid policy (cut, insert, duplicate, swap, re-indent lines)', async () => {
    await fc.assert(
      fc.asyncProperty(mutatedPolicyText, async (text) => {
        const { file, result } = await load(text);
        expectLocatedErrors(file, text, result);
      }),
      RUNS,
    );
  });

  it('on data mutations: an unknown key is an error naming that field', async () => {
    await fc.assert(
      fc.asyncProperty(
        policyArb,
        fc.nat(),
        fc.constantFrom('colour', 'lokc', 'Lock', 'timeout'),
        async (policy, pick, key) => {
          const objects = objectPaths(policy);
          const path = objects[pick % objects.length] ?? [];
          const mutated = structuredClone(policy) as unknown as Record<string, unknown>;
          const target = path.reduce<unknown>(
            (node, part) => (node as Record<string | number, unknown>)[part],
            mutated,
          );
          (target as Record<string, unknown>)[key] = 1;
          const text = stringify(mutated);
          const { file, result } = await load(text);
          expectLocatedErrors(file, text, result);
          if (result.ok) expect.fail(`unknown key ${key} at ${fieldName(path)} was accepted`);
          expect(result.errors.map((e) => e.field)).toContain(fieldName([...path, key]));
        },
      ),
      RUNS,
    );
  });
});

describe('loadPolicies: inputs that once slipped through', () => {
  it('an alias bomb is an error at the first alias, not a hang or a throw', async () => {
    const bomb = ['a: &a [x, x, x, x, x, x, x, x, x]', 'b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]'];
    bomb.push('c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]', 'd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]');
    const { file, result } = await load(bomb.join('\n'));
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.errors[0]?.message).toMatch(/alias/i);
      expect(result.errors[0]).toMatchObject({ file, line: 2, column: 8, field: 'b[0]' });
    }
    const direct = parsePolicyText('direct.yaml', bomb.join('\n'));
    expect(direct.ok).toBe(false);
  });

  // Once a bug: toJS() threw on an alias without its anchor; loadPolicies reported a whole-file
  // error (line 0, no field) and parsePolicyText threw.
  it('an unresolved alias is an error at its line, like a syntax error', async () => {
    const text = [
      'version: 1',
      'routes:',
      '  - name: w',
      '    methods: [*GET]',
      '    path: /a',
      '    upstream: u',
    ].join('\n');
    const { result } = await load(text);
    expect(result.ok).toBe(false);
    if (!result.ok)
      expect(result.errors[0]).toMatchObject({ line: 4, column: 15, field: 'routes[0].methods[0]' });
    const direct = parsePolicyText('direct.yaml', text);
    expect(direct.ok).toBe(false);
    if (!direct.ok) expect(direct.errors[0]).toMatchObject({ line: 4, field: 'routes[0].methods[0]' });
  });

  // Once a bug: YAML 1.1 collection tags (!!omap, !!set) became Map/Set in toJS(), which the
  // schema saw as objects with no properties: the fencing block below compiled to check: token.
  it('a fencing block written as !!omap is honoured or refused, never silently dropped', async () => {
    const text = [
      'version: 1',
      'upstreams:',
      '  orders: { kind: http, url: "http://127.0.0.1:9000" }',
      'routes:',
      '  - name: w',
      '    methods: [PUT]',
      '    path: /orders/:id',
      '    upstream: orders',
      '    lock: "order:{id}"',
      '    fencing: !!omap',
      '      - check: lease',
    ].join('\n');
    const { file, result } = await load(text);
    if (result.ok) expect(result.policy.routes[0]?.fencing?.check).toBe('lease');
    // Refused, at the tag as written.
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.errors).toHaveLength(1);
      expect(result.errors[0]).toMatchObject({ file, line: 10, column: 14, field: 'routes[0].fencing' });
      expect(result.errors[0]?.message).toMatch(/!!omap/);
    }
  });
});

/** Paths of every mapping in the policy (where an unknown key can be added). */
function objectPaths(policy: PolicyData): (string | number)[][] {
  const out: (string | number)[][] = [];
  const walk = (node: unknown, path: (string | number)[]) => {
    if (Array.isArray(node)) node.forEach((v, i) => walk(v, [...path, i]));
    else if (node !== null && typeof node === 'object') {
      if (path.length !== 1 || path[0] !== 'upstreams') out.push(path);
      for (const [k, v] of Object.entries(node)) walk(v, [...path, k]);
    }
  };
  walk(policy, []);
  return out;
}

// ---- generators ----

interface RouteData {
  name: string;
  methods: string[];
  path: string;
  upstream: string;
  lock?: string;
  fencing?: { check?: 'token' | 'lease'; enforce?: boolean; drainTimeoutMs?: number };
}
interface PolicyData {
  version: 1;
  upstreams: Record<string, { kind: 'http'; url: string; timeoutMs?: number }>;
  routes: RouteData[];
}

/** Names, including ones that are also Object.prototype members. */
const nameArb = fc.oneof(
  { weight: 5, arbitrary: fc.stringMatching(/^[A-Za-z][A-Za-z0-9_-]{0,15}$/) },
  { weight: 1, arbitrary: fc.constantFrom('constructor', 'toString', 'valueOf', 'hasOwnProperty') },
);
const paramArb = fc.stringMatching(/^[A-Za-z][A-Za-z0-9_]{0,8}$/);
const literalArb = fc.stringMatching(/^[a-z0-9_~-][a-z0-9._~-]{0,8}$/);
const textArb = fc.stringMatching(/^[a-z][a-z:._-]{0,6}$/);

const pathArb = fc
  .record({
    literals: fc.array(literalArb, { minLength: 1, maxLength: 3 }),
    params: fc.uniqueArray(paramArb, { maxLength: 2 }),
    wildcard: fc.boolean(),
  })
  .map(({ literals, params, wildcard }) => {
    const segments = [...literals, ...params.map((p) => `:${p}`)];
    return { path: `/${segments.join('/')}${wildcard ? '/*' : ''}`, params };
  });

const routeArb = (upstreams: string[]) =>
  fc
    .record({
      name: nameArb,
      methods: fc.uniqueArray(fc.constantFrom(...HTTP_METHODS), { minLength: 1 }),
      at: pathArb,
      upstream: fc.constantFrom(...upstreams),
      fenced: fc.boolean(),
      texts: fc.array(textArb, { minLength: 3, maxLength: 3 }),
      header: fc.boolean(),
      fencing: fc.option(
        fc.record(
          {
            check: fc.constantFrom('token' as const, 'lease' as const),
            enforce: fc.boolean(),
            drainTimeoutMs: fc.integer({ min: 0, max: 600_000 }),
          },
          { requiredKeys: [] },
        ),
        { nil: undefined },
      ),
    })
    .map(({ name, methods, at, upstream, fenced, texts, header, fencing }): RouteData => {
      const route: RouteData = { name, methods, path: at.path, upstream };
      if (!fenced) return route;
      let lock = texts[0] ?? 'lock';
      at.params.forEach((p, i) => (lock += `{${p}}${texts[i + 1] ?? ''}`));
      if (header) lock += ':{header.x-tenant}';
      return fencing === undefined ? { ...route, lock } : { ...route, lock, fencing };
    });

const policyArb: fc.Arbitrary<PolicyData> = fc
  .uniqueArray(nameArb, { minLength: 1, maxLength: 3 })
  .chain((names) =>
    fc.record({
      version: fc.constant(1 as const),
      upstreams: fc
        .array(
          fc.record(
            {
              kind: fc.constant('http' as const),
              url: fc.constantFrom(
                'http://127.0.0.1:9000',
                'https://orders.internal',
                'http://[::1]:8080/api/',
              ),
              timeoutMs: fc.integer({ min: 1, max: 600_000 }),
            },
            { requiredKeys: ['kind', 'url'] },
          ),
          { minLength: names.length, maxLength: names.length },
        )
        .map((ups) =>
          Object.fromEntries(names.map((n, i) => [n, ups[i] ?? { kind: 'http' as const, url: 'http://x' }])),
        ),
      // Each route under its own first segment: routes that overlap are refused unless
      // ordered safely (shadowing.ts), which policy-shadowing.test.ts covers.
      routes: fc
        .uniqueArray(routeArb(names), { selector: (r) => r.name, maxLength: 5 })
        .map((routes) => routes.map((r, i) => ({ ...r, path: `/r${i}${r.path}` }))),
    }),
  );

const KEYS = [
  ...'version upstreams routes name methods path upstream lock fencing check url kind <<'.split(' '),
  '? x',
  'x y',
];
const VALUES = [
  ...`1 2 http "http://x" {a:1} *a | >- null ~ true "open 'q' /orders/:id "order:{id}" { ] @ \` -1 1e9 0x10 lease`.split(
    ' ',
  ),
  ...['', '[GET, PUT]', '&a x', '!!str 1', '!!binary aGk=', '!!set {a}'],
];
/** Line shapes: key/value, list item, list item with a key, bare key, comment, directives, junk. */
const SHAPES: ((key: string, value: string, junk: string) => string)[] = [
  (k, v) => `${k}: ${v}`,
  (_, v) => `- ${v}`,
  (k, v) => `- ${k}: ${v}`,
  (k) => `${k}:`,
  (_, __, j) => `# ${j}`,
  () => '---',
  () => '%YAML 1.2',
  (_, __, j) => j,
];
const lineArb = fc
  .tuple(
    fc.constantFrom('', ' ', '  ', '    ', '      ', '\t'),
    fc.constantFrom(...SHAPES),
    fc.constantFrom(...KEYS),
    fc.constantFrom(...VALUES),
    fc.string({ maxLength: 8 }),
  )
  .map(([indent, shape, key, value, junk]) => indent + shape(key, value, junk));
const yamlishArb = fc.array(lineArb, { maxLength: 25 }).map((lines) => lines.join('\n'));

type TextEdit = {
  op: 'cut' | 'insert' | 'dup' | 'swap' | 'indent' | 'chars';
  a: number;
  b: number;
  line: string;
};
const editArb: fc.Arbitrary<TextEdit> = fc.record({
  op: fc.constantFrom('cut', 'insert', 'dup', 'swap', 'indent', 'chars'),
  a: fc.nat(),
  b: fc.nat(),
  line: lineArb,
});

function applyEdit(lines: string[], e: TextEdit): string[] {
  const out = [...lines];
  const i = e.a % Math.max(1, out.length);
  const j = e.b % Math.max(1, out.length);
  const at = out[i] ?? '';
  switch (e.op) {
    case 'cut':
      out.splice(i, 1 + (e.b % 3));
      break;
    case 'insert':
      out.splice(i, 0, e.line);
      break;
    case 'dup':
      out.splice(j, 0, at);
      break;
    case 'swap':
      out[i] = out[j] ?? '';
      out[j] = at;
      break;
    case 'indent':
      out[i] = e.b % 2 === 0 ? `  ${at}` : at.replace(/^ {1,2}/, '');
      break;
    case 'chars':
      out[i] =
        at.slice(0, e.b % (at.length + 1)) + e.line.slice(0, 3) + at.slice((e.b % (at.length + 1)) + 1);
      break;
  }
  return out;
}

const mutatedPolicyText = fc
  .tuple(policyArb, fc.array(editArb, { minLength: 1, maxLength: 3 }))
  .map(([policy, edits]) => edits.reduce(applyEdit, stringify(policy).split('\n')).join('\n'));
