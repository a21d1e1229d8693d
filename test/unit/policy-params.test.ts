import { describe, expect, it } from 'vitest';
import { formatPolicyError, splitRequestPath } from '../../src/policy/index.js';
import { loadRoutes } from '../helpers/policy-routes.js';

const load = loadRoutes;

const ORDERS = [
  '  - name: order-writes',
  '    methods: [PUT]',
  '    path: /orders/:id',
  '    upstream: up',
  "    lock: 'order:{id}'",
  "    params: { id: '[1-9][0-9]{0,11}' }",
];

describe('route params: anchored rules a parameter must match', () => {
  it('keeps aliases of an id off the fenced route', async () => {
    const { result } = await load(ORDERS);
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    const match = (raw: string) => {
      const split = splitRequestPath(raw);
      if (!split.ok) throw new Error(split.reason);
      return result.policy.match('PUT', split.segments)?.params.id ?? null;
    };
    expect(match('/orders/7058')).toBe('7058');
    for (const alias of [
      '/orders/07057',
      '/orders/7058.json',
      '/orders/7058;v=1',
      '/orders/%EF%BC%97%EF%BC%90',
    ]) {
      expect(match(alias), alias).toBeNull();
    }
    // Anchored: a rule cannot match a prefix or a suffix only.
    expect(match('/orders/1234567890123')).toBeNull();
  });

  it('applies to a final *name capture as a whole', async () => {
    const { result } = await load([
      '  - name: objects',
      '    methods: [PUT]',
      '    path: /files/*key',
      '    upstream: up',
      "    lock: 'file:{key}'",
      "    params: { key: '[a-z]+(/[a-z]+)*\\.pdf' }",
    ]);
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    const m = (p: string) => result.policy.match('PUT', p.split('/').filter(Boolean))?.params.key ?? null;
    expect(m('/files/a/b.pdf')).toBe('a/b.pdf');
    expect(m('/files/a/b.pdf.exe')).toBeNull();
  });

  it('refuses a rule for a parameter the path does not have, and a bad expression, by field', async () => {
    const { file, result } = await load([
      ...ORDERS.slice(0, 5),
      "    params: { orderId: '[0-9]+', id: '([0-9]' }",
    ]);
    expect(result.ok).toBe(false);
    const lines = result.ok ? [] : result.errors.map(formatPolicyError);
    expect(lines.join('\n')).toContain(
      `${file}:12:24: routes[0].params.orderId: the path has no parameter "orderId"`,
    );
    expect(lines.join('\n')).toMatch(/routes\[0\]\.params\.id: invalid regular expression/);
  });

  it('an unfenced literal route the fenced rule refuses does not shadow it', async () => {
    const { result } = await load([
      '  - name: order-search',
      '    methods: [PUT]',
      '    path: /orders/search',
      '    upstream: up',
      ...ORDERS,
    ]);
    expect(result.ok ? [] : result.errors.map(formatPolicyError)).toEqual([]);
  });
});
