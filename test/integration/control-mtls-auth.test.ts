/**
 * Client certificates as credentials, end to end: the control listener asks for a client
 * certificate (mTLS, --control-tls-client-ca) and the auth file maps the verified
 * certificate to a principal by its SHA-256 fingerprint. The certificate alone
 * authenticates; its principal's grants decide; a key naming another principal on the
 * same connection is refused; a certificate the auth file no longer names (after a
 * reload) names nobody. docs/security.md, "Client certificates".
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateApiKey } from '../../src/auth/keys.js';
import { resolveConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/serve.js';
import { dropRedisPrefix, randomNamespace } from '../helpers/e2e.js';
import { httpsRequest, makeTestCerts, type TestCerts } from '../helpers/tls-certs.js';

let certs: TestCerts;
let server: RunningServer;
let authFile: string;
let aliceKey: string;
let aliceHash: string;
const namespace = randomNamespace('fgmtls');

function authText(withCertificate: boolean): string {
  const svc = withCertificate
    ? [
        '  - name: svc',
        `    certificates: [{ fingerprint: '${certs.fingerprint(certs.client.cert)}' }]`,
        '    grants: [{ verbs: [lease, read], prefix: jobs/ }]',
      ]
    : [];
  return [
    'principals:',
    ...svc,
    '  - name: alice',
    `    keys: ['${aliceHash}']`,
    '    grants: [{ verbs: [lease], prefix: orders/ }]',
    '',
  ].join('\n');
}

beforeAll(async () => {
  certs = makeTestCerts();
  ({ key: aliceKey, hash: aliceHash } = await generateApiKey());
  authFile = join(certs.dir, 'auth.yaml');
  writeFileSync(authFile, authText(true));
  const policies = join(certs.dir, 'policy.yaml');
  writeFileSync(policies, 'version: 1\nupstreams: {}\nroutes: []\n');
  server = await startServer(
    resolveConfig({
      flags: {
        store: 'redis://127.0.0.1:6379',
        storeNamespace: namespace,
        allowVolatileRedis: true,
        listen: '127.0.0.1:0',
        control: '127.0.0.1:0',
        policies,
        auth: authFile,
        controlTlsCert: certs.server.cert,
        controlTlsKey: certs.server.key,
        controlTlsClientCa: certs.ca.cert,
      },
    }),
  );
}, 60_000);

afterAll(async () => {
  await server?.close();
  await dropRedisPrefix(namespace);
  certs?.remove();
});

function acquire(key: string, headers: Record<string, string> = {}) {
  return httpsRequest(`${server.control}/v1/locks/${encodeURIComponent(key)}/acquire`, {
    ca: certs.ca.cert,
    client: certs.client,
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ owner: 'w1', ttlMs: 5_000 }),
  });
}

describe('client certificates name principals on the control listener', () => {
  it("a verified certificate is the principal's credential: its grants decide, its name binds the owner", async () => {
    const granted = await acquire('jobs/1');
    expect(granted.status).toBe(200);
    expect(JSON.parse(granted.text)).toMatchObject({ owner: '@svc/w1' });

    const outside = await acquire('orders/1');
    expect(outside.status).toBe(403);
    expect(outside.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(JSON.parse(outside.text)).toMatchObject({ type: 'urn:fencegate:forbidden' });
  });

  it('a key naming another principal on the same connection is refused, not either one', async () => {
    const mixed = await acquire('orders/2', { authorization: `Bearer ${aliceKey}` });
    expect(mixed.status).toBe(401);
    expect(JSON.parse(mixed.text)).toMatchObject({ type: 'urn:fencegate:unauthenticated' });
  });

  it('after a reload that drops the certificate, it names nobody', async () => {
    writeFileSync(authFile, authText(false));
    server.reloadAuth();
    const dropped = await acquire('jobs/3');
    expect(dropped.status).toBe(401);
    expect(dropped.headers['www-authenticate']).toMatch(/^Bearer/);
    // The key still works over the same mTLS listener.
    const byKey = await acquire('orders/3', { authorization: `Bearer ${aliceKey}` });
    expect(byKey.status).toBe(200);
    expect(JSON.parse(byKey.text)).toMatchObject({ owner: '@alice/w1' });
  });
});
