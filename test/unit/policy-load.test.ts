import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatPolicyError, loadPolicies, type PolicyError } from '../../src/policies.js';

const BROKEN = 'test/fixtures/policies/broken';

async function errorsOf(path: string): Promise<PolicyError[]> {
  const result = await loadPolicies(path);
  if (result.ok) throw new Error(`${path} unexpectedly loaded`);
  return result.errors;
}

/** [fixture, expected "file:line:col: field: " prefix, a fragment of the message] */
const CASES: [string, string, string][] = [
  ['duplicate-key.yaml', `${BROKEN}/duplicate-key.yaml:8:5: routes[0].path: `, 'Map keys must be unique'],
  ['multi-doc.yaml', `${BROKEN}/multi-doc.yaml:2:1: `, 'one YAML document'],
  ['empty.yaml', `${BROKEN}/empty.yaml:1:1: `, 'file is empty'],
  [
    'unknown-key.yaml',
    `${BROKEN}/unknown-key.yaml:9:5: routes[0].lokc: `,
    'unknown field (allowed: name, methods',
  ],
  [
    'wrong-type.yaml',
    `${BROKEN}/wrong-type.yaml:6:16: upstreams.orders.timeoutMs: `,
    'must be an integer (got "soon")',
  ],
  ['out-of-range.yaml', `${BROKEN}/out-of-range.yaml:6:16: upstreams.orders.timeoutMs: `, 'must be >= 1'],
  ['missing-field.yaml', `${BROKEN}/missing-field.yaml:5:5: routes[0].path: `, 'missing required field'],
  [
    'bad-enum.yaml',
    `${BROKEN}/bad-enum.yaml:11:14: routes[0].fencing.check: `,
    'must be one of token, lease, sequencer',
  ],
  ['bad-method.yaml', `${BROKEN}/bad-method.yaml:8:9: routes[0].methods[1]: `, '(got "FETCH")'],
  ['bad-version.yaml', `${BROKEN}/bad-version.yaml:2:10: version: `, 'must be 1 (got 2)'],
  [
    'bad-name.yaml',
    `${BROKEN}/bad-name.yaml:3:3: upstreams["orders service"]: `,
    'name must be 1-64 letters',
  ],
  [
    'unknown-upstream.yaml',
    `${BROKEN}/unknown-upstream.yaml:8:15: routes[0].upstream: `,
    'unknown upstream "billing"',
  ],
  [
    'unknown-param.yaml',
    `${BROKEN}/unknown-param.yaml:9:11: routes[0].lock: `,
    'unknown path parameter "id"',
  ],
  ['bad-template.yaml', `${BROKEN}/bad-template.yaml:9:11: routes[0].lock: `, 'unclosed "{"'],
  [
    'forbidden-header.yaml',
    `${BROKEN}/forbidden-header.yaml:9:11: routes[0].lock: `,
    '"fencing-token" header',
  ],
  [
    'duplicate-route.yaml',
    `${BROKEN}/duplicate-route.yaml:9:11: routes[1].name: `,
    'duplicate route name "orders"',
  ],
  [
    'bad-path.yaml',
    `${BROKEN}/bad-path.yaml:7:11: routes[0].path: `,
    '"*" is only allowed as the last segment',
  ],
  [
    'foreign-field.yaml',
    `${BROKEN}/foreign-field.yaml:6:18: upstreams.orders.fenceSchema: `,
    'only postgres upstreams take "fenceSchema"',
  ],
  [
    'foreign-field.yaml',
    `${BROKEN}/foreign-field.yaml:12:12: routes[0].table: `,
    'only routes of a "postgres" upstream take "table"',
  ],
  [
    'foreign-prepared.yaml',
    `${BROKEN}/foreign-prepared.yaml:6:25: upstreams.media.preparedStatements: `,
    'only postgres upstreams take "preparedStatements" (this one is s3)',
  ],
  [
    'prepared-not-bool.yaml',
    `${BROKEN}/prepared-not-bool.yaml:6:25: upstreams.shop.preparedStatements: `,
    'must be true or false (got "no")',
  ],
  ['pool-size-zero.yaml', `${BROKEN}/pool-size-zero.yaml:6:15: upstreams.shop.poolSize: `, 'must be >= 1'],
  [
    'foreign-override.yaml',
    `${BROKEN}/foreign-override.yaml:6:21: upstreams.ledger.methodOverride: `,
    'only http upstreams honour method-override headers (this one is postgres)',
  ],
  [
    'unknown-kind.yaml',
    `${BROKEN}/unknown-kind.yaml:4:11: upstreams.orders.kind: `,
    'unknown kind "ftp" (known: http',
  ],
  [
    'fencing-without-lock.yaml',
    `${BROKEN}/fencing-without-lock.yaml:10:7: routes[0].fencing: `,
    'need a "lock"',
  ],
];

describe('loadPolicies: broken files name file, line, column and field', () => {
  it.each(CASES)('%s', async (fixture, prefix, fragment) => {
    const errors = await errorsOf(`${BROKEN}/${fixture}`);
    const lines = errors.map(formatPolicyError);
    expect(
      lines.some((l) => l.startsWith(prefix) && l.includes(fragment)),
      lines.join('\n'),
    ).toBe(true);
  });

  it('a YAML syntax error (kept out of fixtures so formatters leave it alone)', async () => {
    const file = join(await mkdtemp(join(tmpdir(), 'fg-policy-')), 'syntax.yaml');
    await writeFile(
      file,
      'version: 1\nroutes:\n  - name: order-writes\n    methods: [PUT, POST\n    path: /orders/:id\n',
    );
    const [error] = await errorsOf(file);
    expect(formatPolicyError(error!)).toMatch(
      new RegExp(`^${file}:5:5: routes\\[0\\]\\.path: YAML syntax error: `),
    );
  });

  it('bad URLs: wrong scheme and unparseable, each at its own line', async () => {
    const lines = (await errorsOf(`${BROKEN}/bad-url.yaml`)).map(formatPolicyError);
    expect(lines).toEqual([
      `${BROKEN}/bad-url.yaml:5:10: upstreams.orders.url: must be an http:// or https:// URL`,
      `${BROKEN}/bad-url.yaml:8:10: upstreams.billing.url: "not a url" is not a valid URL`,
    ]);
  });

  it('reports every error of a file, not just the first', async () => {
    const file = join(await mkdtemp(join(tmpdir(), 'fg-policy-')), 'many.yaml');
    const text = [
      'version: 1',
      'routes:',
      '  - name: a',
      '    methods: [GET, get]',
      '    path: x',
      '    colour: red',
    ];
    await writeFile(file, text.join('\n'));
    const fields = (await errorsOf(file)).map((e) => e.field).sort();
    expect(fields).toEqual(['routes[0].colour', 'routes[0].methods[1]', 'routes[0].upstream']);
  });

  it('duplicate upstream names across files are errors, located in the second file', async () => {
    const lines = (await errorsOf('test/fixtures/policies/dup-upstream')).map(formatPolicyError);
    expect(lines).toEqual([
      'test/fixtures/policies/dup-upstream/b.yaml:4:3: upstreams.orders: duplicate upstream name "orders" ' +
        '(first defined at test/fixtures/policies/dup-upstream/a.yaml:3:3)',
    ]);
  });

  it('duplicate route names across files are errors', async () => {
    const [error, ...rest] = await errorsOf('test/fixtures/policies/dup-route');
    expect(rest).toEqual([]);
    expect(error).toMatchObject({
      file: 'test/fixtures/policies/dup-route/b.yaml',
      line: 7,
      field: 'routes[1].name',
    });
  });

  it('a missing path and an empty directory are whole-file errors', async () => {
    const [missing] = await errorsOf('test/fixtures/policies/does-not-exist');
    expect(formatPolicyError(missing!)).toBe(
      'test/fixtures/policies/does-not-exist: cannot read: no such file or directory',
    );
    const [empty] = await errorsOf(await mkdtemp(join(tmpdir(), 'fg-policy-empty-')));
    expect(empty?.message).toContain('no *.yaml or *.yml policy files');
  });
});

describe('loadPolicies: a valid directory', () => {
  it('loads *.yaml files sorted, routes in file order, with defaults applied', async () => {
    const result = await loadPolicies('test/fixtures/policies/valid');
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    const { policy } = result;
    expect(policy.files).toEqual([
      'test/fixtures/policies/valid/10-upstreams.yaml',
      'test/fixtures/policies/valid/20-routes.yaml',
    ]);
    expect(policy.routes.map((r) => r.name)).toEqual(['order-writes', 'order-reads', 'tenant-items']);
    const [writes, reads, tenant] = policy.routes;
    expect(writes?.fencing).toEqual({ check: 'token', enforce: true, drainTimeoutMs: 5000 });
    expect(writes?.upstream).toMatchObject({
      name: 'orders',
      origin: 'http://127.0.0.1:9000',
      basePath: '',
      timeoutMs: 2000,
    });
    expect(writes?.line).toBe(3);
    expect(reads?.lock).toBeNull();
    expect(reads?.fencing).toBeNull();
    expect(tenant?.fencing).toEqual({ check: 'lease', enforce: false, drainTimeoutMs: 250 });
    expect(tenant?.upstream).toMatchObject({ basePath: '/api', timeoutMs: 10000 });
    expect(tenant?.upstream.breaker).toEqual({
      errorThresholdPercentage: 25,
      volumeThreshold: 2,
      resetTimeoutMs: 1000,
      rollingWindowMs: 10000,
    });
  });

  it('compiles into a frozen table', async () => {
    const result = await loadPolicies('test/fixtures/policies/valid');
    if (!result.ok) throw new Error('expected ok');
    expect(Object.isFrozen(result.policy)).toBe(true);
    expect(Object.isFrozen(result.policy.routes)).toBe(true);
    expect(Object.isFrozen(result.policy.routes[0]?.upstream)).toBe(true);
    expect(Object.isFrozen(result.policy.routes[0]?.path.segments)).toBe(true);
  });

  it('the example policies in policies/ are valid', async () => {
    const result = await loadPolicies('policies');
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    expect(result.policy.routes.find((r) => r.name === 'invoice-writes-shadow')?.fencing?.enforce).toBe(
      false,
    );
  });
});
