/**
 * `virtualHostDomains` on an s3 upstream: checked where it is written (file, line,
 * column and field), compiled longest first, and refused on other kinds.
 */
import { describe, expect, it } from 'vitest';
import { formatPolicyError, loadPolicies } from '../../src/policies.js';

const BROKEN = 'test/fixtures/policies/broken';

/** [fixture, expected "file:line:col: field: " prefix, a fragment of the message] */
const CASES: [string, string, string][] = [
  [
    'vhost-domain-bad.yaml',
    `${BROKEN}/vhost-domain-bad.yaml:6:43: upstreams.objects.virtualHostDomains[1]: `,
    'must be a DNS name in lower case',
  ],
  [
    'vhost-domain-nested.yaml',
    `${BROKEN}/vhost-domain-nested.yaml:8:9: upstreams.objects.virtualHostDomains[1]: `,
    'is under "s3.test", also listed',
  ],
  [
    'vhost-domain-foreign.yaml',
    `${BROKEN}/vhost-domain-foreign.yaml:6:25: upstreams.orders.virtualHostDomains: `,
    'only s3 upstreams take "virtualHostDomains" (this one is http)',
  ],
  [
    'vhost-domain-not-list.yaml',
    `${BROKEN}/vhost-domain-not-list.yaml:6:25: upstreams.objects.virtualHostDomains: `,
    'must be a list',
  ],
  [
    'vhost-domain-repeated.yaml',
    `${BROKEN}/vhost-domain-repeated.yaml:6:25: upstreams.objects.virtualHostDomains: `,
    'duplicate items',
  ],
];

describe('virtualHostDomains in a policy', () => {
  it.each(CASES)('%s', async (fixture, prefix, fragment) => {
    const result = await loadPolicies(`${BROKEN}/${fixture}`);
    if (result.ok) throw new Error(`${fixture} unexpectedly loaded`);
    const lines = result.errors.map(formatPolicyError);
    expect(
      lines.some((l) => l.startsWith(prefix) && l.includes(fragment)),
      lines.join('\n'),
    ).toBe(true);
  });

  it('the s3 example policy shows it, and loads', async () => {
    const result = await loadPolicies('policies/examples/s3.yaml');
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    expect(result.policy.upstreams.objects?.settings.s3).toEqual({
      virtualHostDomains: null,
      ownHost: '127.0.0.1',
    });
  });
});
