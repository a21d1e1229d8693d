/**
 * The auth settings in the config (src/config.ts): --auth / FENCEGATE_AUTH / `auth`,
 * --health, --insecure, and the rule that keeps an unauthenticated control listener on
 * loopback (exposureProblem).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { exposureProblem, isLoopback, resolveConfig } from '../../src/config.js';

describe('auth settings', () => {
  it('come from flags, the environment and the config file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fg-cfg-'));
    try {
      const file = join(dir, 'fencegate.yaml');
      await writeFile(file, 'auth: /etc/fencegate/auth.yaml\nhealth: 0.0.0.0:9091\ninsecure: false\n');
      const fromFile = resolveConfig({ file });
      expect(fromFile.auth).toBe('/etc/fencegate/auth.yaml');
      expect(fromFile.health).toEqual({ host: '0.0.0.0', port: 9091 });
      const fromEnv = resolveConfig({
        file,
        env: { FENCEGATE_AUTH: '/run/auth.json', FENCEGATE_HEALTH: ':9999', FENCEGATE_INSECURE: 'yes' },
      });
      expect(fromEnv).toMatchObject({ auth: '/run/auth.json', health: { port: 9999 }, insecure: true });
      expect(resolveConfig({ flags: { insecure: true } }).insecure).toBe(true);
      expect(() => resolveConfig({ env: { FENCEGATE_HEALTH: 'nope' } })).toThrow(
        /environment FENCEGATE_HEALTH: "nope" is not HOST:PORT/,
      );
      await writeFile(file, 'insecure: perhaps\n');
      expect(() => resolveConfig({ file })).toThrow(
        /fencegate\.yaml:1:1: insecure: "perhaps" must be true or false/,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('tell loopback addresses from others', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '::ffff:127.0.0.1'])
      expect(isLoopback(h), h).toBe(true);
    for (const h of [
      '0.0.0.0',
      '::',
      '10.0.0.1',
      '192.168.1.1',
      'example.com',
      '::ffff:10.0.0.1',
      '128.0.0.1',
    ])
      expect(isLoopback(h), h).toBe(false);
  });

  it('refuse a non-loopback control listener without an auth file unless insecure', () => {
    const open = resolveConfig({ flags: { control: '0.0.0.0:9090' } });
    expect(exposureProblem(open)).toMatch(
      /^refusing to serve the control listener on 0\.0\.0\.0:9090 without/,
    );
    expect(exposureProblem(resolveConfig({ flags: { control: '[::]:9090' } }))).toMatch(/on \[::\]:9090/);
    expect(exposureProblem(resolveConfig({ flags: { control: '0.0.0.0:9090', insecure: true } }))).toBeNull();
    expect(exposureProblem(resolveConfig({ flags: { control: '0.0.0.0:9090', auth: 'a.yaml' } }))).toBeNull();
    expect(exposureProblem(resolveConfig({}))).toBeNull();
  });
});
