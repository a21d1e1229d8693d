/**
 * TLS on both listeners (mTLS on the control listener), certificate reload without
 * dropping connections, https upstreams with a private CA (per upstream in the policy,
 * and --upstream-ca), and bad files at start and at reload. Certificates are made by the
 * test (test/helpers/tls-certs.ts); the store is the shared Redis under a fresh prefix.
 */
import { copyFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { once } from 'node:events';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveConfig, type RawSettings } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/serve.js';
import { dropRedisPrefix, randomNamespace } from '../helpers/e2e.js';
import { httpsRequest, keepAliveAgent, makeTestCerts, type TestCerts } from '../helpers/tls-certs.js';

let certs: TestCerts;
let upstream: Server;
let upstreamUrl: string;
let server: RunningServer;
const namespaces: string[] = [];
/** The data listener's files, overwritten by the reload tests. */
let dataCert: string;
let dataKey: string;

function settings(extra: RawSettings = {}): RawSettings {
  const namespace = randomNamespace('fgtls');
  namespaces.push(namespace);
  return {
    store: 'redis://127.0.0.1:6379',
    storeNamespace: namespace,
    allowVolatileRedis: true,
    listen: '127.0.0.1:0',
    control: '127.0.0.1:0',
    policies: join(certs.dir, 'policy.yaml'),
    ...extra,
  };
}

beforeAll(async () => {
  certs = makeTestCerts();
  // An https upstream whose certificate comes from the test's private CA.
  upstream = createServer(
    { cert: certs.read(certs.server.cert), key: certs.read(certs.server.key) },
    (req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ upstream: 'private', path: req.url }));
    },
  );
  upstream.listen(0, '127.0.0.1');
  await once(upstream, 'listening');
  const port = (upstream.address() as { port: number }).port;
  upstreamUrl = `https://127.0.0.1:${port}`;
  // ca: relative to the policy file.
  writeFileSync(
    join(certs.dir, 'policy.yaml'),
    [
      'version: 1',
      'upstreams:',
      '  pinned:',
      '    kind: http',
      `    url: ${upstreamUrl}`,
      '    tls:',
      '      ca: ca.pem',
      '  unpinned:',
      '    kind: http',
      `    url: ${upstreamUrl}`,
      'routes:',
      '  - {name: pinned, methods: [GET], path: /pinned/*, upstream: pinned}',
      '  - {name: unpinned, methods: [GET], path: /unpinned/*, upstream: unpinned}',
      '',
    ].join('\n'),
  );
  dataCert = join(certs.dir, 'data.pem');
  dataKey = join(certs.dir, 'data.key');
  copyFileSync(certs.server.cert, dataCert);
  copyFileSync(certs.server.key, dataKey);
  server = await startServer(
    resolveConfig({
      flags: settings({
        tlsCert: dataCert,
        tlsKey: dataKey,
        controlTlsCert: certs.server.cert,
        controlTlsKey: certs.server.key,
        controlTlsClientCa: certs.ca.cert,
      }),
    }),
  );
}, 60_000);

afterAll(async () => {
  await server?.close();
  upstream?.close();
  for (const ns of namespaces) await dropRedisPrefix(ns);
  certs?.remove();
});

describe('TLS listeners', () => {
  it('both listeners speak https, and say so in their URLs', async () => {
    expect(server.data).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(server.control).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const data = await httpsRequest(`${server.data}/pinned/x`, { ca: certs.ca.cert });
    expect(data.status).toBe(200);
    expect(data.fingerprint).toBe(certs.fingerprint(certs.server.cert));
    const control = await httpsRequest(`${server.control}/healthz`, {
      ca: certs.ca.cert,
      client: certs.client,
    });
    expect(control.status).toBe(200);
    expect(JSON.parse(control.text)).toEqual({ ok: true });
  });

  it('the HTTP server options hold over TLS: a request without Host is a problem, not a bare 400', async () => {
    const { connect } = await import('node:tls');
    const u = new URL(server.data);
    const socket = connect({ host: u.hostname, port: Number(u.port), ca: certs.read(certs.ca.cert) });
    let answer = '';
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (answer += d));
    await once(socket, 'secureConnect');
    socket.end('GET /pinned/x HTTP/1.1\r\nconnection: close\r\n\r\n');
    await once(socket, 'close');
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer).toMatch(/content-type: application\/problem\+json/i);
    expect(answer).toContain('urn:fencegate:bad-request');
  });

  it('a plain-HTTP request to a TLS listener gets no answer as HTTP', async () => {
    await expect(fetch(server.data.replace('https:', 'http:') + '/pinned/x')).rejects.toThrow();
  });

  it('mTLS: the control listener refuses a client without a certificate, or with one from another CA', async () => {
    await expect(httpsRequest(`${server.control}/healthz`, { ca: certs.ca.cert })).rejects.toThrow();
    await expect(
      httpsRequest(`${server.control}/healthz`, { ca: certs.ca.cert, client: certs.otherClient }),
    ).rejects.toThrow();
    const ok = await httpsRequest(`${server.control}/healthz`, { ca: certs.ca.cert, client: certs.client });
    expect(ok.status).toBe(200);
  });

  it('the data listener without a client CA takes clients without certificates', async () => {
    const r = await httpsRequest(`${server.data}/pinned/y`, { ca: certs.ca.cert });
    expect(r.status).toBe(200);
  });
});

describe('the TypeScript client over mTLS', () => {
  it('acquires on the mTLS control listener and writes through the https data listener (fetch with an undici Agent)', async () => {
    // As docs/client.md shows: one dispatcher with the CA and the client certificate.
    const { Agent, fetch: undiciFetch } = await import('undici');
    const dispatcher = new Agent({
      connect: {
        ca: certs.read(certs.ca.cert),
        cert: certs.read(certs.client.cert),
        key: certs.read(certs.client.key),
      },
    });
    const { FencegateClient } = await import('../../src/client/index.js');
    const fg = new FencegateClient({
      url: server.control,
      fetch: ((url: string, init?: RequestInit) =>
        undiciFetch(url, { ...(init as object), dispatcher })) as unknown as typeof fetch,
    });
    try {
      await fg.withLock('tls:1', { owner: 'w1', ttlMs: 5_000 }, async (lock) => {
        expect(lock.token > 0n).toBe(true);
        const res = await lock.fetch(`${server.data}/pinned/through-sdk`);
        expect(res.status).toBe(200);
        expect(await res.json()).toEqual({ upstream: 'private', path: '/pinned/through-sdk' });
      });
    } finally {
      await dispatcher.close();
    }
  });
});

describe('certificate reload', () => {
  it('swaps the certificate for new connections; one open before keeps working; a bad file keeps the old', async () => {
    const before = certs.fingerprint(certs.server.cert);
    const after = certs.fingerprint(certs.server2.cert);
    expect(before).not.toBe(after);
    const agent = await keepAliveAgent(certs.ca.cert);
    try {
      const first = await httpsRequest(`${server.data}/pinned/1`, { ca: certs.ca.cert, agent });
      expect(first.fingerprint).toBe(before);

      copyFileSync(certs.server2.cert, dataCert);
      copyFileSync(certs.server2.key, dataKey);
      const report = server.reloadTls('SIGHUP');
      expect(report).toEqual({ ok: true, changed: ['data listener'], errors: [] });

      // The connection opened before the reload is reused and still served, on its old certificate.
      const second = await httpsRequest(`${server.data}/pinned/2`, { ca: certs.ca.cert, agent });
      expect(second.status).toBe(200);
      expect(second.reused).toBe(true);
      expect(second.fingerprint).toBe(before);
      // A new connection gets the new certificate.
      const fresh = await httpsRequest(`${server.data}/pinned/3`, { ca: certs.ca.cert });
      expect(fresh.status).toBe(200);
      expect(fresh.fingerprint).toBe(after);

      // A broken file: the reload fails naming it, the certificate in use stays.
      writeFileSync(dataCert, 'not a certificate\n');
      const bad = server.reloadTls('SIGHUP');
      expect(bad.ok).toBe(false);
      expect(bad.errors[0]?.file).toBe(dataCert);
      expect(bad.errors[0]?.message).toContain(dataCert);
      const still = await httpsRequest(`${server.data}/pinned/4`, { ca: certs.ca.cert });
      expect(still.fingerprint).toBe(after);
      // A key that does not match the certificate is refused too.
      copyFileSync(certs.server.cert, dataCert);
      const mismatch = server.reloadTls('SIGHUP');
      expect(mismatch.ok).toBe(false);
      expect(mismatch.errors[0]?.message).toMatch(/does not match the certificate/);
      expect((await httpsRequest(`${server.data}/pinned/5`, { ca: certs.ca.cert })).fingerprint).toBe(after);
      // Nothing changed on the other listener.
      copyFileSync(certs.server2.cert, dataCert);
      expect(server.reloadTls('SIGHUP')).toEqual({ ok: true, changed: [], errors: [] });
    } finally {
      agent.destroy();
    }
  });
});

describe('https upstreams', () => {
  it('an upstream pinned to the private CA works; without the CA it is a 502 problem', async () => {
    const pinned = await httpsRequest(`${server.data}/pinned/a`, { ca: certs.ca.cert });
    expect(pinned.status).toBe(200);
    expect(JSON.parse(pinned.text)).toEqual({ upstream: 'private', path: '/pinned/a' });
    const unpinned = await httpsRequest(`${server.data}/unpinned/a`, { ca: certs.ca.cert });
    expect(unpinned.status).toBe(502);
    expect(unpinned.headers['content-type']).toMatch(/^application\/problem\+json/);
    const problem = JSON.parse(unpinned.text) as { type: string; detail: string };
    expect(problem).toMatchObject({ type: 'urn:fencegate:upstream-unavailable', status: 502 });
    // The certificate check failed (its chain ends at a CA nobody told the gateway about).
    expect(problem.detail).toMatch(
      /\((UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT_LOCALLY|SELF_SIGNED_CERT_IN_CHAIN)\)/,
    );
  });

  it('--upstream-ca makes upstreams without their own CA trust it, and follows the file on reload', async () => {
    const upstreamCa = join(certs.dir, 'upstream-ca.pem');
    copyFileSync(certs.otherCa.cert, upstreamCa);
    const other = await startServer(resolveConfig({ flags: settings({ upstreamCa }) }));
    try {
      expect(other.data).toMatch(/^http:\/\//);
      // Another CA than the upstream's: refused, 502.
      const refused = await fetch(`${other.data}/unpinned/b`);
      expect(refused.status).toBe(502);
      copyFileSync(certs.ca.cert, upstreamCa);
      expect(other.reloadTls('SIGHUP')).toEqual({ ok: true, changed: ['upstream CA'], errors: [] });
      const r = await fetch(`${other.data}/unpinned/b`);
      expect(r.status).toBe(200);
      expect(await r.json()).toEqual({ upstream: 'private', path: '/unpinned/b' });
      // An upstream with its own tls.ca keeps using it.
      expect((await fetch(`${other.data}/pinned/b`)).status).toBe(200);
    } finally {
      await other.close();
    }
  });
});

describe('bad TLS files at start', () => {
  it('one error naming the file', async () => {
    const missing = join(certs.dir, 'nope.pem');
    await expect(
      startServer(resolveConfig({ flags: settings({ tlsCert: missing, tlsKey: certs.server.key }) })),
    ).rejects.toThrow(`data listener certificate ${missing}: cannot read (ENOENT)`);
    await expect(
      startServer(
        resolveConfig({
          flags: settings({
            controlTlsCert: certs.server.cert,
            controlTlsKey: certs.server2.key,
          }),
        }),
      ),
    ).rejects.toThrow(
      `control listener key ${certs.server2.key}: does not match the certificate in ${certs.server.cert}`,
    );
    await expect(
      startServer(
        resolveConfig({
          flags: settings({ tlsCert: certs.server.cert, tlsKey: certs.server.cert }),
        }),
      ),
    ).rejects.toThrow(`data listener key ${certs.server.cert}: not an unencrypted PEM private key`);
    await expect(
      startServer(resolveConfig({ flags: settings({ upstreamCa: certs.server.key }) })),
    ).rejects.toThrow(`upstream CA ${certs.server.key}: no PEM certificate in it`);
  });
});
