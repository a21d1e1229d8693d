import { describe, expect, it } from 'vitest';
import { parsePathPattern } from '../../src/policy/path-pattern.js';
import { pathsOverlap } from '../../src/policy/shadowing.js';
import { loadRoutes } from '../helpers/policy-routes.js';

/** A policy file whose routes are given as YAML lines (each route's lines indented by 2). */
const load = (...routes: string[][]) => loadRoutes(routes.flat());

const route = (name: string, methods: string, path: string, extra: string[] = []) => [
  `  - name: ${name}`,
  `    methods: [${methods}]`,
  `    path: ${path}`,
  '    upstream: up',
  ...extra.map((l) => `    ${l}`),
];
const fenced = (name: string, methods: string, path: string, lock: string, extra: string[] = []) =>
  route(name, methods, path, [`lock: '${lock}'`, ...extra]);

describe('policy loading refuses an earlier route that takes a later fenced route’s writes', () => {
  it('an unfenced route listed before a fenced one: both routes and their lines are named', async () => {
    const { file, errors } = await load(
      route('open', 'PUT, GET', '/orders/*'),
      fenced('order-writes', 'PUT', '/orders/:id', 'order:{id}'),
    );
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain(`${file}:9:11: routes[0].path: route "open" comes first`);
    expect(errors[0]).toContain(`fenced route "order-writes" (${file}:11)`);
    expect(errors[0]).toContain('it is not fenced (PUT)');
  });

  it('a literal path the fenced pattern also matches', async () => {
    const { errors } = await load(
      route('special', 'PUT', '/orders/special'),
      fenced('order-writes', 'PUT', '/orders/:id', 'order:{id}'),
    );
    expect(errors.join()).toContain('route "special" comes first');
  });

  it('a route fenced by a different lock, a shadow-mode route before an enforced one, a weaker check', async () => {
    const other = await load(
      fenced('by-tenant', 'PUT', '/orders/:id', 'tenant:{id}'),
      fenced('order-writes', 'PUT', '/orders/:id', 'order:{id}'),
    );
    expect(other.errors.join()).toContain('its lock "tenant:{id}" differs from "order:{id}"');
    const shadow = await load(
      fenced('trial', 'PUT', '/orders/:id', 'order:{id}', ['fencing:', '  enforce: false']),
      fenced('order-writes', 'PUT', '/orders/:id', 'order:{id}'),
    );
    expect(shadow.errors.join()).toContain('it only shadows the fence');
    const weaker = await load(
      fenced('by-token', 'PUT', '/orders/:id', 'order:{id}'),
      fenced('order-writes', 'PUT', '/orders/:id', 'order:{id}', ['fencing: { check: sequencer }']),
    );
    expect(weaker.errors.join()).toContain('its check "token" is weaker than "sequencer"');
    const stronger = await load(
      fenced('signed', 'PUT', '/orders/:id', 'order:{id}', ['fencing: { check: sequencer }']),
      fenced('order-writes', 'PUT', '/orders/:id', 'order:{id}', ['fencing: { check: lease }']),
    );
    expect(stronger.errors).toEqual([]);
  });

  it('accepts routes that cannot take each other’s writes, or fence them with the same key', async () => {
    const cases = [
      // Disjoint methods: reads first, then fenced writes on the same paths (the usual layout).
      [route('reads', 'GET, HEAD', '/orders/*'), fenced('writes', 'PUT', '/orders/:id', 'order:{id}')],
      // Disjoint paths.
      [route('items', 'PUT', '/items/:id'), fenced('writes', 'PUT', '/orders/:id', 'order:{id}')],
      [route('deeper', 'PUT', '/orders/:id/notes'), fenced('writes', 'PUT', '/orders/:id', 'order:{id}')],
      // The same lock under another parameter name renders the same key.
      [
        fenced('first', 'PUT', '/orders/:orderId', 'order:{orderId}'),
        fenced('second', 'PUT, PATCH', '/orders/:id', 'order:{id}'),
      ],
      // A fenced route before an unfenced one is the right order.
      [fenced('writes', 'PUT', '/orders/:id', 'order:{id}'), route('rest', 'PUT', '/*')],
    ];
    for (const routes of cases) {
      const { errors } = await load(...routes);
      expect(errors).toEqual([]);
    }
  });

  it('`shadows` accepts the overlap on purpose, and must name a later route', async () => {
    const ok = await load(
      route('admin', 'PUT', '/orders', ['shadows: [order-writes]']),
      fenced('order-writes', 'PUT', '/orders/*key', 'order:{key}'),
    );
    expect(ok.errors).toEqual([]);
    const unknown = await load(
      route('admin', 'PUT', '/admin', ['shadows: [nope]']),
      fenced('order-writes', 'PUT', '/orders/:id', 'order:{id}'),
    );
    expect(unknown.errors.join()).toMatch(/routes\[0\]\.shadows\[0\]: unknown route "nope"/);
    const earlier = await load(
      fenced('order-writes', 'PUT', '/orders/:id', 'order:{id}'),
      route('admin', 'PUT', '/admin', ['shadows: [order-writes]']),
    );
    expect(earlier.errors.join()).toContain('route "order-writes" comes before this one');
  });
});

describe('pathsOverlap', () => {
  const p = (s: string) => {
    const r = parsePathPattern(s);
    if (!r.ok) throw new Error(r.reason);
    return r.pattern;
  };
  it.each([
    ['/orders/:id', '/orders/:x', true],
    ['/orders/42', '/orders/:id', true],
    ['/orders/42', '/orders/43', false],
    ['/orders', '/orders/:id', false],
    ['/orders/*', '/orders', true],
    ['/orders/*', '/orders/:id/notes', true],
    ['/orders/:id', '/items/*', false],
    ['/*', '/a/b/c', true],
    ['/a/*', '/b/*', false],
    ['/', '/*', true],
    ['/', '/:id', false],
  ])('%s and %s: %s', (a, b, expected) => {
    expect(pathsOverlap(p(a), p(b))).toBe(expected);
    expect(pathsOverlap(p(b), p(a))).toBe(expected);
  });
});
