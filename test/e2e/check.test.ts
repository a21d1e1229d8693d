/**
 * `fencegate check PATH…` from the built CLI: valid files and directories pass with
 * "ok" and exit 0; broken ones exit 1 with one `file:line:col: field: message` line
 * per error on stderr (fixtures in test/fixtures/e2e/check/).
 */
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/procs.js';

const F = 'test/fixtures/e2e/check';

/** `file:line:col: field: message`; a field is a path such as routes[0].fencing.check or upstreams["a b"]. */
const ERROR_LINE = /^(\S+?):(\d+):(\d+): ([A-Za-z_]\w*(?:\.[\w-]+|\[\d+\]|\["(?:[^"\\]|\\.)*"\])*): (.+)$/;

function errorLines(stderr: string): string[] {
  const lines = stderr.split('\n').filter((l) => l.length > 0);
  for (const l of lines) expect(l).toMatch(ERROR_LINE);
  return lines;
}

describe('fencegate check', () => {
  it('accepts a valid file and a valid directory', async () => {
    const r = await runCli(['check', `${F}/valid.yaml`, `${F}/valid-dir`]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n').filter(Boolean)).toEqual([
      `${F}/valid.yaml: ok (1 routes)`,
      // *.yaml and *.yml, hidden files and other extensions skipped
      `${F}/valid-dir: ok (2 routes)`,
    ]);
  });

  it('accepts the example policies the README serves', async () => {
    const r = await runCli(['check', 'policies']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^policies: ok \(\d+ routes\)$/m);
  });

  it.each([
    [
      'an unknown (misspelled) field',
      'unknown-field.yaml',
      [
        `${F}/unknown-field.yaml:11:5: routes[0].lokc: unknown field (allowed: name, methods, path, upstream, lock, fencing, upload, idempotency, params, shadows, table, key, columns)`,
      ],
    ],
    [
      'wrong types and values, all reported',
      'bad-values.yaml',
      [
        `${F}/bad-values.yaml:6:16: upstreams.orders.timeoutMs: must be an integer (got "soon")`,
        `${F}/bad-values.yaml:9:20: routes[0].methods[1]: must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS (got "FETCH")`,
        `${F}/bad-values.yaml:14:14: routes[0].fencing.check: must be one of token, lease, sequencer (got "signature")`,
      ],
    ],
    [
      'unknown upstream, unknown path parameter, duplicate route, misplaced "*"',
      'cross.yaml',
      [
        `${F}/cross.yaml:10:15: routes[0].upstream: unknown upstream "billing"`,
        `${F}/cross.yaml:11:11: routes[0].lock: references unknown path parameter "id"`,
        `${F}/cross.yaml:12:11: routes[1].name: duplicate route name "order-writes" (first defined at ${F}/cross.yaml:7:11)`,
        `${F}/cross.yaml:14:11: routes[1].path: "*" is only allowed as the last segment`,
      ],
    ],
    [
      'an unfenced route listed before the fenced route whose writes it would take',
      'shadowing.yaml',
      [
        `${F}/shadowing.yaml:9:11: routes[0].path: route "open" comes first and takes writes that the fenced route ` +
          `"order-writes" (${F}/shadowing.yaml:11) declares, but it is not fenced (PUT): move "order-writes" above it, ` +
          'narrow its path or methods, fence it with the same lock, or, if it must take them, list "order-writes" in its "shadows"',
      ],
    ],
    [
      'idempotency settings the schema refuses: a ttl out of range, an unknown field',
      'idempotency.yaml',
      [
        `${F}/idempotency.yaml:12:14: routes[0].idempotency.ttlMs: must be >= 1000`,
        `${F}/idempotency.yaml:18:7: routes[1].idempotency.ttl: unknown field (allowed: header, ttlMs)`,
      ],
    ],
    [
      'idempotency on a bad or reserved header, on a route of safe methods only, on a kind that cannot replay',
      'idempotency-semantic.yaml',
      [
        `${F}/idempotency-semantic.yaml:15:15: routes[0].idempotency.header: "Idempotency_Key" is not a header name (1-64 letters, digits or !#$%&'*+.^\`|~-; no "_")`,
        `${F}/idempotency-semantic.yaml:21:15: routes[1].idempotency.header: "Fencing-Token" has another meaning: pick another header`,
        `${F}/idempotency-semantic.yaml:26:18: routes[2].idempotency: the route takes only GET, HEAD or OPTIONS, whose retries repeat nothing: remove "idempotency"`,
        `${F}/idempotency-semantic.yaml:35:7: routes[3].idempotency: routes of a "postgres" upstream cannot replay answers (only http routes take "idempotency")`,
      ],
    ],
    [
      'a duplicate upstream across files and fencing without a lock',
      'broken-dir',
      [
        `${F}/broken-dir/b.yaml:3:3: upstreams.orders: duplicate upstream name "orders" (first defined at ${F}/broken-dir/a.yaml:3:3)`,
        `${F}/broken-dir/b.yaml:12:7: routes[0].fencing: fencing settings need a "lock" on the route`,
      ],
    ],
  ])('refuses %s with file:line:col: field: message', async (_what, path, expected) => {
    const r = await runCli(['check', `${F}/${path}`]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(errorLines(r.stderr)).toEqual(expected);
  });

  it('points a YAML syntax error at the exact line and column', async () => {
    const r = await runCli(['check', `${F}/syntax.yaml`]);
    expect(r.code).toBe(1);
    const lines = errorLines(r.stderr);
    expect(lines[0]).toBe(
      `${F}/syntax.yaml:5:5: routes[0].path: YAML syntax error: Flow sequence in block collection must be sufficiently indented and end with a ]`,
    );
    for (const l of lines)
      expect(l).toMatch(/^test\/fixtures\/e2e\/check\/syntax\.yaml:5:\d+: .*YAML syntax error/);
  });

  it('checks every path it is given: ok for the good ones, errors for the bad ones, exit 1', async () => {
    const r = await runCli(['check', `${F}/valid.yaml`, `${F}/unknown-field.yaml`, `${F}/valid-dir`]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`${F}/valid.yaml: ok (1 routes)`);
    expect(r.stdout).toContain(`${F}/valid-dir: ok (2 routes)`);
    expect(errorLines(r.stderr)).toHaveLength(1);
  });

  it('an unset ${ENV} in an upstream url is one error: its routes are still judged by the kind it declares', async () => {
    const r = await runCli(['check', `${F}/unset-env.yaml`], { FG_CHECK_UNSET_URL: undefined });
    expect(r.code).toBe(1);
    expect(errorLines(r.stderr)).toEqual([
      `${F}/unset-env.yaml:6:10: upstreams.shop.url: environment variable "FG_CHECK_UNSET_URL" is not set (referenced as \${…} in url; \${NAME:-default} gives a default)`,
    ]);
  });

  it('reports a missing path and a directory without policy files', async () => {
    const missing = await runCli(['check', `${F}/does-not-exist.yaml`]);
    expect(missing.code).toBe(1);
    expect(missing.stdout).toBe('');
    expect(missing.stderr.trim()).toBe(`${F}/does-not-exist.yaml: cannot read: no such file or directory`);

    const empty = await runCli(['check', `${F}/empty-dir`]);
    expect(empty.code).toBe(1);
    expect(empty.stderr.trim()).toBe(`${F}/empty-dir: no *.yaml or *.yml policy files in directory`);
  });

  it('needs at least one path', async () => {
    const r = await runCli(['check']);
    expect(r.code).not.toBe(0);
    expect(r.code).not.toBe(1); // a usage error, not a policy error
    expect(r.stderr).toMatch(/at least one policy file or directory/);
  });
});
