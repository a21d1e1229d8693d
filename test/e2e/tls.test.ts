/**
 * `fencegate serve` with TLS as a user runs it: https listeners (mTLS on the control
 * listener), a real SIGHUP swapping the data listener's certificate while a connection
 * opened before keeps working, and a bad certificate at start as one line naming it.
 */
import { copyFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { openRedisStore } from '../../src/store/redis/store.js';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropRedisPrefix, randomNamespace, waitFor } from '../helpers/e2e.js';
import { runCli, startFencegate, type FencegateProcess } from '../helpers/procs.js';
import type { RedisServer } from '../helpers/redis-server.js';
import {
  httpsRequest,
  keepAliveAgent,
  makeTestCerts,
  startTlsRedis,
  type TestCerts,
} from '../helpers/tls-certs.js';

let certs: TestCerts;
let fg: FencegateProcess;
const namespace = randomNamespace('fgtlse2e');
let cert: string;
let key: string;

const storeArgs = [
  '--store',
  'redis://127.0.0.1:6379',
  '--store-namespace',
  namespace,
  '--allow-volatile-redis',
  '--policies',
  'test/fixtures/empty-policy.yaml',
];

beforeAll(async () => {
  certs = makeTestCerts();
  cert = join(certs.dir, 'data.pem');
  key = join(certs.dir, 'data.key');
  copyFileSync(certs.server.cert, cert);
  copyFileSync(certs.server.key, key);
  fg = await startFencegate([
    ...storeArgs,
    '--log-level',
    'info',
    '--log-format',
    'json',
    '--tls-cert',
    cert,
    '--tls-key',
    key,
    '--control-tls-cert',
    certs.server.cert,
    '--control-tls-key',
    certs.server.key,
    '--control-tls-client-ca',
    certs.ca.cert,
  ]);
}, 120_000);

afterAll(async () => {
  await fg?.stop();
  await dropRedisPrefix(namespace);
  certs?.remove();
});

describe('fencegate serve with TLS', () => {
  it('logs https URLs; the control listener wants a client certificate', async () => {
    expect(fg.data).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(fg.control).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const health = await httpsRequest(`${fg.control}/healthz`, { ca: certs.ca.cert, client: certs.client });
    expect(health.status).toBe(200);
    await expect(httpsRequest(`${fg.control}/healthz`, { ca: certs.ca.cert })).rejects.toThrow();
    const noRoute = await httpsRequest(`${fg.data}/anything`, { ca: certs.ca.cert });
    expect(noRoute.status).toBe(404);
    expect(noRoute.headers['content-type']).toMatch(/^application\/problem\+json/);
  });

  it('SIGHUP swaps the certificate; a connection opened before keeps working', async () => {
    const agent = await keepAliveAgent(certs.ca.cert);
    try {
      const before = await httpsRequest(`${fg.data}/a`, { ca: certs.ca.cert, agent });
      expect(before.fingerprint).toBe(certs.fingerprint(certs.server.cert));
      copyFileSync(certs.server2.cert, cert);
      copyFileSync(certs.server2.key, key);
      fg.proc.kill('SIGHUP');
      await waitFor(
        'the TLS reload line',
        () => /SIGHUP: TLS files reloaded \(data listener\)/.test(fg.output()),
        30_000,
      );
      const kept = await httpsRequest(`${fg.data}/b`, { ca: certs.ca.cert, agent });
      expect(kept.reused).toBe(true);
      expect(kept.status).toBe(404);
      expect(kept.fingerprint).toBe(certs.fingerprint(certs.server.cert));
      const fresh = await httpsRequest(`${fg.data}/c`, { ca: certs.ca.cert });
      expect(fresh.fingerprint).toBe(certs.fingerprint(certs.server2.cert));

      // A bad file on the next SIGHUP: an error naming it; the certificate in use stays.
      copyFileSync(certs.ca.key, cert);
      fg.proc.kill('SIGHUP');
      await waitFor(
        'the TLS reload error',
        () => fg.output().includes('TLS reload failed for the data listener'),
        30_000,
      );
      const line = fg.logs().find((l) => l.msg.includes('TLS reload failed'));
      expect(line?.msg).toContain(`data listener certificate ${cert}: no PEM certificate in it`);
      expect(line?.level).toBe(50);
      const still = await httpsRequest(`${fg.data}/d`, { ca: certs.ca.cert });
      expect(still.fingerprint).toBe(certs.fingerprint(certs.server2.cert));
    } finally {
      agent.destroy();
    }
  }, 60_000);

  it('--help lists the TLS flags and their environment variables', async () => {
    const help = await runCli(['--help']);
    for (const text of [
      '--tls-cert FILE --tls-key FILE',
      '--tls-client-ca FILE',
      '--control-tls-cert FILE --control-tls-key FILE',
      '--control-tls-client-ca FILE',
      '--upstream-ca FILE',
      '--store-ca FILE',
      'FENCEGATE_TLS_CERT',
      'FENCEGATE_TLS_KEY',
      'FENCEGATE_TLS_CLIENT_CA',
      'FENCEGATE_CONTROL_TLS_CERT',
      'FENCEGATE_CONTROL_TLS_KEY',
      'FENCEGATE_CONTROL_TLS_CLIENT_CA',
      'FENCEGATE_UPSTREAM_CA',
      'FENCEGATE_STORE_CA',
    ])
      expect(help.stdout).toContain(text);
  });

  it('a bad certificate at start: one line naming the file, exit 2', async () => {
    const missing = join(certs.dir, 'missing.pem');
    const r = await runCli([
      'serve',
      ...storeArgs,
      '--listen',
      '127.0.0.1:0',
      '--control',
      '127.0.0.1:0',
      '--log-level',
      'silent',
      '--tls-cert',
      missing,
      '--tls-key',
      certs.server.key,
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(`fencegate: data listener certificate ${missing}: cannot read (ENOENT)\n`);
    const half = await runCli(['serve', ...storeArgs, '--tls-cert', certs.server.cert]);
    expect(half.code).toBe(2);
    expect(half.stderr).toBe(
      'fencegate: --tls-cert needs --tls-key (a certificate and its key go together)\n',
    );
  }, 60_000);
});

describe('fencegate epoch bump on rediss:// with --store-ca', () => {
  let redis: RedisServer;
  let url: string;

  beforeAll(async () => {
    ({ redis, url } = await startTlsRedis(certs));
  }, 30_000);

  afterAll(async () => {
    await redis?.stop();
  });

  it('connects with the CA; without it, one line naming the certificate problem', async () => {
    // A bump acts on a store fencegate made: one is opened there first.
    const made = await openRedisStore(url, {
      tlsCa: [await readFile(certs.ca.cert, 'utf8')],
      allowVolatileRedis: true,
    });
    await made.close();
    const ok = await runCli([
      'epoch',
      'bump',
      '--store',
      url,
      '--store-ca',
      certs.ca.cert,
      '--allow-volatile-redis',
    ]);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^new epoch /);
    const missing = join(certs.dir, 'missing-ca.pem');
    const noFile = await runCli([
      'epoch',
      'bump',
      '--store',
      url,
      '--store-ca',
      missing,
      '--allow-volatile-redis',
    ]);
    expect(noFile.code).toBe(2);
    expect(noFile.stderr).toBe(`fencegate: store CA ${missing}: cannot read (ENOENT)\n`);
  }, 60_000);
});
