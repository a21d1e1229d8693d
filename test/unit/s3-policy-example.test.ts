import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatPolicyError, loadPolicies } from '../../src/policies.js';

describe('the s3 example policy', () => {
  it('is valid', async () => {
    const result = await loadPolicies('policies/examples/s3.yaml');
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    expect(result.policy.upstreams.objects?.kind).toBe('s3');
    const route = result.policy.routes.find((r) => r.name === 'invoice-objects');
    expect(route?.path.rest).toBe('key');
  });

  it('is not loaded with policies/ (what npm start serves)', async () => {
    const result = await loadPolicies('policies');
    if (!result.ok) throw new Error(result.errors.map(formatPolicyError).join('\n'));
    expect(Object.values(result.policy.upstreams).some((u) => u.kind === 's3')).toBe(false);
  });

  it('an s3 upstream takes no path', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fg-s3-policy-'));
    const file = join(dir, 'p.yaml');
    writeFileSync(file, 'version: 1\nupstreams:\n  objects: { kind: s3, url: "http://127.0.0.1:9100/s3" }\n');
    const result = await loadPolicies(file);
    expect(result.ok).toBe(false);
    if (!result.ok)
      expect(formatPolicyError(result.errors[0]!)).toMatch(
        /upstreams\.objects\.url: an s3 upstream takes no path/,
      );
  });
});
