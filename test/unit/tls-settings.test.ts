/**
 * The TLS settings that are checked without a network: config combinations, an
 * upstream's `tls` in a policy (files relative to the policy, errors at file:line:field),
 * Postgres sslmode parameters, and peerCertificate on a real mTLS handshake.
 */
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, resolveConfig } from '../../src/config.js';
import { listenerTlsOptions, peerCertificate } from '../../src/http/tls.js';
import { formatPolicyError, loadPolicies } from '../../src/policies.js';
import { compilePostgresUpstream } from '../../src/gateway/kinds/postgres/settings.js';
import { checkStoreSpec } from '../../src/store/index.js';
import { pgConnection, sslParamsProblem } from '../../src/store/sql/pg-ssl.js';
import { httpsRequest, makeTestCerts, type TestCerts } from '../helpers/tls-certs.js';

let certs: TestCerts;

beforeAll(() => {
  certs = makeTestCerts();
});

afterAll(() => certs?.remove());

describe('TLS config settings', () => {
  it('flags, environment variables and config-file keys', () => {
    const file = join(certs.dir, 'config.yaml');
    writeFileSync(file, `controlTlsCert: /c.pem\ncontrolTlsKey: /c.key\nupstreamCa: /u.pem\n`);
    const c = resolveConfig({
      file,
      env: { FENCEGATE_TLS_CERT: '/d.pem', FENCEGATE_TLS_KEY: '/d.key', FENCEGATE_TLS_CLIENT_CA: '/ca.pem' },
      flags: { controlTlsClientCa: '/cca.pem' },
    });
    expect(c).toMatchObject({
      tlsCert: '/d.pem',
      tlsKey: '/d.key',
      tlsClientCa: '/ca.pem',
      controlTlsCert: '/c.pem',
      controlTlsKey: '/c.key',
      controlTlsClientCa: '/cca.pem',
      upstreamCa: '/u.pem',
      storeCa: null,
      storeCert: null,
      storeKey: null,
    });
  });

  it('a certificate needs its key, a client CA needs TLS, a store CA or certificate needs rediss:// or etcds://', () => {
    const bad = (flags: Record<string, string>) => () => resolveConfig({ flags });
    expect(bad({ tlsCert: '/x.pem' })).toThrow(ConfigError);
    expect(bad({ tlsCert: '/x.pem' })).toThrow('--tls-cert needs --tls-key');
    expect(bad({ controlTlsKey: '/x.key' })).toThrow('--control-tls-key needs --control-tls-cert');
    expect(bad({ tlsClientCa: '/ca.pem' })).toThrow('--tls-client-ca needs --tls-cert and --tls-key');
    expect(bad({ storeCa: '/ca.pem', store: 'redis://127.0.0.1:6379' })).toThrow(
      '--store-ca applies to a rediss://',
    );
    expect(bad({ storeCa: '/ca.pem', store: 'postgres://db/x' })).toThrow('sslrootcert');
    expect(resolveConfig({ flags: { storeCa: '/ca.pem', store: 'rediss://db:6380' } }).storeCa).toBe(
      '/ca.pem',
    );
    expect(resolveConfig({ flags: { storeCa: '/ca.pem', store: 'etcds://db:2379' } }).storeCa).toBe(
      '/ca.pem',
    );
    expect(bad({ storeCa: '/ca.pem', store: 'etcd://db:2379' })).toThrow(
      '--store-ca applies to a rediss://, rediss+cluster:// or etcds://',
    );
    expect(bad({ storeCert: '/c.pem', store: 'etcds://db:2379' })).toThrow('--store-cert needs --store-key');
    expect(bad({ storeKey: '/k.pem', store: 'rediss://db:6380' })).toThrow('--store-key needs --store-cert');
    expect(bad({ storeCert: '/c.pem', storeKey: '/k.pem', store: 'redis://db:6379' })).toThrow(
      '--store-cert applies to a rediss://, rediss+cluster:// or etcds://',
    );
    expect(
      resolveConfig({ flags: { storeCert: '/c.pem', storeKey: '/k.pem', store: 'etcds://db:2379' } }),
    ).toMatchObject({ storeCert: '/c.pem', storeKey: '/k.pem' });
  });
});

describe('upstream tls in a policy', () => {
  const policy = (tls: string, url = 'https://127.0.0.1:8443') =>
    [
      'version: 1',
      'upstreams:',
      '  api:',
      '    kind: http',
      `    url: ${url}`,
      '    tls:',
      ...tls.split('\n').map((l) => `      ${l}`),
      'routes:',
      '  - {name: r, methods: [GET], path: /x, upstream: api}',
      '',
    ].join('\n');

  async function errors(text: string, name = 'p.yaml'): Promise<string[]> {
    const file = join(certs.dir, name);
    writeFileSync(file, text);
    const r = await loadPolicies(file);
    return r.ok ? [] : r.errors.map(formatPolicyError);
  }

  it('reads the CA and client pair relative to the policy file', async () => {
    const file = join(certs.dir, 'ok.yaml');
    writeFileSync(file, policy('ca: ca.pem\nserverName: localhost\ncert: client.pem\nkey: client.key'));
    const r = await loadPolicies(file);
    expect(r.ok).toBe(true);
    const tls = r.ok ? r.policy.upstreams.api?.tls : null;
    expect(tls?.ca?.[0]).toBe(certs.read(certs.ca.cert).trim());
    expect(tls?.serverName).toBe('localhost');
    expect(tls?.cert).toContain('BEGIN CERTIFICATE');
    expect(tls?.key).toContain('PRIVATE KEY');
  });

  it('unknown keys, missing files, mismatched pairs and plain-http urls are errors at file:line: field', async () => {
    const file = join(certs.dir, 'p.yaml');
    expect(await errors(policy('ca: ca.pem\ncafile: x'))).toEqual([
      expect.stringMatching(/^.*p\.yaml:8:7: upstreams\.api\.tls\.cafile: unknown field/),
    ]);
    expect(await errors(policy('ca: missing.pem'))).toEqual([
      `${file}:7:11: upstreams.api.tls.ca: CA ${join(certs.dir, 'missing.pem')}: cannot read (ENOENT)`,
    ]);
    expect(await errors(policy('ca: client.key'))).toEqual([
      `${file}:7:11: upstreams.api.tls.ca: CA ${join(certs.dir, 'client.key')}: no PEM certificate in it`,
    ]);
    expect(await errors(policy('cert: client.pem\nkey: server.key'))).toEqual([
      `${file}:8:12: upstreams.api.tls.key: client key ${join(certs.dir, 'server.key')}: does not match the certificate in ${join(certs.dir, 'client.pem')}`,
    ]);
    expect(await errors(policy('cert: client.pem'))).toEqual([
      `${file}:7:13: upstreams.api.tls.cert: needs "key" too (the gateway's certificate and key, for mTLS to the upstream)`,
    ]);
    expect(await errors(policy('ca: ca.pem', 'http://127.0.0.1:8080'))).toEqual([
      `${file}:7:7: upstreams.api.tls: TLS settings need an https:// url`,
    ]);
    expect(await errors(policy('{}'))).toEqual([expect.stringContaining('upstreams.api.tls: ')]);
  });
});

describe('postgres sslmode', () => {
  it('refuses modes that fall back to plain text, ssl=, and files without a mode', () => {
    expect(sslParamsProblem('postgres://db/x?sslmode=prefer')).toMatch(/falls back to plain text/);
    expect(sslParamsProblem('postgres://db/x?sslmode=allow')).toMatch(/falls back to plain text/);
    expect(sslParamsProblem('postgres://db/x?sslmode=bogus')).toMatch(/not supported/);
    expect(sslParamsProblem('postgres://db/x?ssl=true')).toMatch(/use sslmode=/);
    expect(sslParamsProblem('postgres://db/x?sslrootcert=/ca.pem')).toMatch(/without sslmode/);
    expect(sslParamsProblem('postgres://db/x?sslmode=verify-full&sslcert=/c.pem')).toMatch(/go together/);
    expect(sslParamsProblem('postgres://db/x?sslmode=verify-full')).toBeNull();
    // Checked with the --store setting, password redacted.
    expect(checkStoreSpec('postgres://u:secret@db/x?sslmode=prefer')).toMatch(/^"postgres:\/\/u:\*\*\*@db/);
    expect(() => resolveConfig({ flags: { store: 'postgres://db/x?sslmode=prefer' } })).toThrow(ConfigError);
  });

  it('maps each mode to what libpq means, and strips the parameters from the URL', () => {
    const ca = certs.ca.cert;
    const full = pgConnection(
      `postgres://u:p@db:5432/x?sslmode=verify-full&sslrootcert=${ca}&application_name=a`,
    );
    expect(full.connectionString).toBe('postgres://u:p@db:5432/x?application_name=a');
    expect(full.ssl).toMatchObject({ rejectUnauthorized: true, ca: [certs.read(ca).trim()] });
    expect(full.ssl && full.ssl.checkServerIdentity).toBeUndefined();

    const verifyCa = pgConnection(`postgres://db/x?sslmode=verify-ca&sslrootcert=${ca}`);
    expect(verifyCa.ssl).toMatchObject({ rejectUnauthorized: true });
    expect(typeof (verifyCa.ssl && verifyCa.ssl.checkServerIdentity)).toBe('function');

    expect(pgConnection('postgres://db/x?sslmode=require').ssl).toMatchObject({ rejectUnauthorized: false });
    // require with a root certificate: verify-ca (as libpq does).
    expect(pgConnection(`postgres://db/x?sslmode=require&sslrootcert=${ca}`).ssl).toMatchObject({
      rejectUnauthorized: true,
    });
    expect(pgConnection('postgres://db/x?sslmode=verify-full&sslrootcert=system').ssl).toEqual({
      rejectUnauthorized: true,
    });
    expect(pgConnection('postgres://db/x?sslmode=disable')).toEqual({
      connectionString: 'postgres://db/x',
      ssl: false,
    });
    expect(pgConnection('postgres://db/x')).toEqual({ connectionString: 'postgres://db/x', ssl: false });
    const withClient = pgConnection(
      `postgres://db/x?sslmode=verify-full&sslrootcert=${ca}&sslcert=${certs.client.cert}&sslkey=${certs.client.key}`,
    );
    expect(withClient.ssl).toMatchObject({
      cert: certs.read(certs.client.cert).trim(),
      key: certs.read(certs.client.key),
    });
    expect(() =>
      pgConnection(
        `postgres://db/x?sslmode=verify-full&sslcert=${certs.client.cert}&sslkey=${certs.server.key}`,
      ),
    ).toThrow(
      `postgres client key ${certs.server.key}: does not match the certificate in ${certs.client.cert}`,
    );
    const missing = join(certs.dir, 'missing.pem');
    expect(() => pgConnection(`postgres://db/x?sslmode=verify-full&sslrootcert=${missing}`)).toThrow(
      `sslrootcert ${missing}: cannot read (ENOENT)`,
    );
  });
});

describe('postgres upstream (kind: postgres) sslmode', () => {
  it('checks the parameters and files when the policy loads, at the url field', () => {
    const prefer = compilePostgresUpstream({ url: 'postgres://app:pw@db/shop?sslmode=prefer' });
    expect(prefer).toMatchObject({
      ok: false,
      errors: [{ field: 'url', message: expect.stringMatching(/falls back/) }],
    });
    const missing = join(certs.dir, 'missing.pem');
    const noFile = compilePostgresUpstream({
      url: `postgres://app:hunter2@db/shop?sslmode=verify-full&sslrootcert=${missing}`,
    });
    expect(noFile).toMatchObject({
      ok: false,
      errors: [{ field: 'url', message: `sslrootcert ${missing}: cannot read (ENOENT)` }],
    });
    expect(JSON.stringify(noFile)).not.toContain('hunter2');
    const ok = compilePostgresUpstream({
      url: `postgres://db/shop?sslmode=verify-full&sslrootcert=${certs.ca.cert}`,
    });
    expect(ok.ok).toBe(true);
  });
});

describe('peerCertificate', () => {
  let server: Server;
  let url: string;
  let seen: (string | null)[] = [];

  beforeAll(async () => {
    const options = listenerTlsOptions(
      { cert: certs.server.cert, key: certs.server.key, clientCa: certs.ca.cert },
      'test listener',
    );
    // requestCert without rejecting, to see what the helper returns for each client.
    server = createServer({ ...options, rejectUnauthorized: false }, (req, res) => {
      seen.push(String(peerCertificate(req.socket)?.subject.CN ?? '') || null);
      res.end('ok');
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `https://127.0.0.1:${(server.address() as { port: number }).port}/`;
  });

  afterAll(() => server?.close());

  it('is the verified client certificate, or null', async () => {
    seen = [];
    await httpsRequest(url, { ca: certs.ca.cert, client: certs.client });
    await httpsRequest(url, { ca: certs.ca.cert, client: certs.otherClient });
    await httpsRequest(url, { ca: certs.ca.cert });
    expect(seen).toEqual(['client', null, null]);
    expect(peerCertificate({})).toBeNull();
  });
});
