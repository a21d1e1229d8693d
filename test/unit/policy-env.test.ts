/**
 * ${NAME} and ${NAME:-default} in upstream urls (src/policy/env.ts), for every kind, and
 * the example policies that use them: they load as they stand, and `--sample HOST:PORT`
 * moves the sample service and the example policy's upstream together (policyEnv).
 */
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { loadPolicies } from '../../src/policies.js';
import { KINDS } from '../../src/gateway/kinds/index.js';
import { loadPolicies as loadWith } from '../../src/policy/load.js';
import { expandEnv } from '../../src/policy/env.js';
import { policyEnv } from '../../src/serve.js';

describe('expandEnv', () => {
  it('takes the variable when set and not empty, else the default', () => {
    expect(expandEnv('http://${H:-127.0.0.1:9000}/x', {})).toEqual({
      ok: true,
      value: 'http://127.0.0.1:9000/x',
    });
    expect(expandEnv('http://${H:-127.0.0.1:9000}/x', { H: '' })).toEqual({
      ok: true,
      value: 'http://127.0.0.1:9000/x',
    });
    expect(expandEnv('http://${H:-127.0.0.1:9000}/x', { H: 'svc:80' })).toEqual({
      ok: true,
      value: 'http://svc:80/x',
    });
    expect(expandEnv('${A}${B:-}', { A: 'a' })).toEqual({ ok: true, value: 'a' });
  });

  it('names an unset variable without a default once, and refuses malformed references', () => {
    const r = expandEnv('${X}/${X}/${Y:-y}', {});
    expect(r).toEqual({
      ok: false,
      message:
        'environment variable "X" is not set (referenced as ${…} in url; ${NAME:-default} gives a default)',
    });
    expect(expandEnv('${1X:-a}', {})).toMatchObject({ ok: false });
    expect(expandEnv('a${B', {})).toEqual({ ok: false, message: 'unterminated "${" in url' });
    // A value that itself holds "${" is not expanded again, nor taken for a broken reference.
    expect(expandEnv('${P}', { P: 'x${y' })).toEqual({ ok: true, value: 'x${y' });
  });
});

describe('example policies', () => {
  it('load as they stand, with no variable set: each upstream at its default', async () => {
    const env = {};
    const orders = await loadWith('policies', KINDS, env);
    expect(orders.ok && orders.policy.upstreams.orders?.origin).toBe('http://127.0.0.1:9000');
    const s3 = await loadWith('policies/examples/s3.yaml', KINDS, env);
    expect(s3.ok && s3.policy.upstreams.objects?.origin).toBe('http://127.0.0.1:9100');
    const pg = await loadWith('policies/examples/postgres.yaml', KINDS, env);
    expect(pg.ok).toBe(true);
  });

  it('take their upstream from the environment when it is set', async () => {
    const s3 = await loadWith('policies/examples/s3.yaml', KINDS, { INVOICES_S3_URL: 'http://minio:9000' });
    expect(s3.ok && s3.policy.upstreams.objects?.origin).toBe('http://minio:9000');
  });

  it('serve --sample HOST:PORT points the example policy at the sample it runs', async () => {
    const config = resolveConfig({ flags: { sample: '127.0.0.1:9123', policies: 'policies' }, env: {} });
    const loaded = await loadWith('policies', KINDS, policyEnv(config));
    expect(loaded.ok && loaded.policy.upstreams.orders?.origin).toBe('http://127.0.0.1:9123');
    const v6 = resolveConfig({ flags: { sample: '[::1]:9124' }, env: {} });
    expect(policyEnv(v6).FENCEGATE_SAMPLE).toBe('[::1]:9124');
    // Without --sample, the environment as it is.
    expect((await loadPolicies('policies')).ok).toBe(true);
  });
});
