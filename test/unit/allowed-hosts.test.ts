/**
 * The control listener's Host allow-list (src/http/allowed-hosts.ts), the DNS-rebinding
 * defence: which Host headers each list answers for, and what the setting accepts.
 * The listener itself: test/integration/control-limits.test.ts; a real browser:
 * test/e2e/dns-rebinding.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { hostAllowList, hostOf, parseAllowedHosts } from '../../src/http/allowed-hosts.js';
import { resolveConfig } from '../../src/config.js';

describe('Host allow-list', () => {
  it('without an auth file: localhost, loopback literals and the bind address only', () => {
    const list = hostAllowList(null, { authenticated: false, bindHost: '127.0.0.1' });
    expect(list).not.toBeNull();
    for (const ok of [
      'localhost',
      'localhost:9090',
      '127.0.0.1:9090',
      '127.9.9.9',
      '[::1]:9090',
      'LOCALHOST.',
      undefined,
    ])
      expect(list!.allows(ok), String(ok)).toBe(true);
    for (const bad of [
      'rebind.test:9090',
      'evil.example',
      'localhost.evil.example',
      '10.0.0.5:9090',
      '',
      ':9090',
      '[::1',
      'a:b:c',
    ])
      expect(list!.allows(bad), bad).toBe(false);
    // Bound to an address of its own (with --insecure): that address is answered too.
    const bound = hostAllowList(null, { authenticated: false, bindHost: '10.0.0.5' });
    expect(bound!.allows('10.0.0.5:9090')).toBe(true);
    expect(hostAllowList(null, { authenticated: false, bindHost: '0.0.0.0' })!.allows('0.0.0.0')).toBe(false);
  });

  it('with an auth file: no check unless names are listed; listed names are added to loopback', () => {
    expect(hostAllowList(null, { authenticated: true, bindHost: '0.0.0.0' })).toBeNull();
    const listed = hostAllowList(['fencegate.internal'], { authenticated: true, bindHost: '0.0.0.0' });
    expect(listed!.allows('fencegate.internal:9090')).toBe(true);
    expect(listed!.allows('localhost')).toBe(true);
    expect(listed!.allows('other.internal')).toBe(false);
    expect(hostAllowList(['*'], { authenticated: false, bindHost: '127.0.0.1' })).toBeNull();
  });

  it('parses the setting, naming a bad entry', () => {
    expect(parseAllowedHosts('Fencegate.Internal, 10.0.0.5,[::1],*')).toEqual([
      'fencegate.internal',
      '10.0.0.5',
      '::1',
      '*',
    ]);
    expect(parseAllowedHosts('good.example,bad_name')).toMatch(/"bad_name" is not a host name/);
    expect(parseAllowedHosts(' , ')).toMatch(/at least one/);
    expect(hostOf('[::1]:80')).toBe('::1');
    expect(hostOf('Example.COM.:8080')).toBe('example.com');
    expect(() => resolveConfig({ flags: { allowedHosts: 'a.example,http://x' } })).toThrow(
      /--allowed-hosts: "http:\/\/x" is not a host name/,
    );
    expect(resolveConfig({ env: { FENCEGATE_ALLOWED_HOSTS: 'a.example' } }).allowedHosts).toEqual([
      'a.example',
    ]);
  });
});
