/**
 * Which Hosts are path style, virtual-hosted (a bucket) or refused on an s3 route
 * (src/gateway/kinds/s3/hosts.ts), and how `virtualHostDomains` is checked.
 */
import { describe, expect, it } from 'vitest';
import { compileHostDomains, hostStyle, type S3HostSettings } from '../../src/gateway/kinds/s3/hosts.js';

const undeclared: S3HostSettings = { virtualHostDomains: null, ownHost: 'minio.internal' };
const declared: S3HostSettings = {
  virtualHostDomains: ['s3.example.test', 'localhost'],
  ownHost: 'minio.internal',
};
const none: S3HostSettings = { virtualHostDomains: [], ownHost: 'minio.internal' };

const style = (host: string | undefined, settings: S3HostSettings) => {
  const s = hostStyle(host, settings);
  return s.style === 'virtual' ? `bucket ${s.bucket}` : s.style;
};

describe('hostStyle', () => {
  it('path style: no Host, IP literals, names without a dot, the upstream own name', () => {
    for (const settings of [undeclared, declared, none]) {
      for (const host of [
        undefined,
        '',
        '127.0.0.1',
        '127.0.0.1:8080',
        '[::1]:8080',
        '[2001:db8::1]',
        'localhost',
        'localhost:8080',
        'minio',
        'gw:9000',
        'minio.internal:9000',
      ]) {
        expect(style(host, settings), `${host} (${settings.virtualHostDomains})`).toBe('path');
      }
    }
  });

  it('undeclared: any other dotted name may name a bucket, and is refused', () => {
    for (const host of [
      'invoices.localhost',
      'invoices.localhost:8080',
      'fencegate.internal',
      'localhost.',
    ]) {
      expect(style(host, undeclared), host).toBe('refused');
    }
    const why = hostStyle('invoices.localhost', undeclared);
    expect(why).toMatchObject({ style: 'refused' });
    if (why.style === 'refused') expect(why.reason).toMatch(/virtualHostDomains/);
  });

  it('declared: the domain itself is path style, <bucket>.<domain> is the bucket, other dotted names are refused', () => {
    expect(style('s3.example.test:9000', declared)).toBe('path');
    expect(style('invoices.s3.example.test:9000', declared)).toBe('bucket invoices');
    expect(style('my.dotted-bucket.s3.example.test', declared)).toBe('bucket my.dotted-bucket');
    expect(style('invoices.localhost:8080', declared)).toBe('bucket invoices');
    expect(style('other.example.test', declared)).toBe('refused');
    expect(style('xs3.example.test', declared)).toBe('refused'); // not under the domain: no "." before it
  });

  it('declared: upper case, a name that is not a bucket, and a Host that is not a host name are refused', () => {
    expect(style('Invoices.s3.example.test', declared)).toBe('refused');
    expect(style('INVOICES.LOCALHOST', undeclared)).toBe('refused');
    for (const bucket of ['ab', 'a..b', '-ab', 'ab-', '192.168.1.1', 'x'.repeat(64)]) {
      expect(style(`${bucket}.s3.example.test`, declared), bucket).toBe('refused');
    }
    for (const host of ['a b.s3.example.test', 'user@invoices.localhost', 'a:b:c', 'x/y']) {
      expect(style(host, declared), host).toBe('refused');
    }
  });

  it('declared none ([]): the storage serves no virtual hosts, every host name is path style', () => {
    for (const host of ['invoices.localhost', 'fencegate.internal:8080', 'Gateway.Example.Test']) {
      expect(style(host, none), host).toBe('path');
    }
  });
});

describe('compileHostDomains', () => {
  it('absent: not declared; a list: checked and longest first', () => {
    expect(compileHostDomains(undefined)).toEqual({ ok: true, domains: null });
    expect(compileHostDomains([])).toEqual({ ok: true, domains: [] });
    expect(compileHostDomains(['localhost', 's3.example.test'])).toEqual({
      ok: true,
      domains: ['s3.example.test', 'localhost'],
    });
  });

  it('refuses what is not a lower-case DNS name, IP addresses, ports, and a domain under another listed one', () => {
    const errors = (raw: string[]) => {
      const r = compileHostDomains(raw);
      return r.ok ? [] : r.errors.map((e) => e.field);
    };
    expect(errors(['S3.example.test'])).toEqual([['virtualHostDomains', 0]]);
    expect(errors(['ok.test', '10.0.0.1'])).toEqual([['virtualHostDomains', 1]]);
    expect(errors(['s3.test:9000', '.s3.test', 's3..test', '*.s3.test', '-a.test'])).toHaveLength(5);
    expect(errors(['s3.test', 'eu.s3.test'])).toEqual([['virtualHostDomains', 1]]);
  });
});
