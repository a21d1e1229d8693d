/**
 * TLS to the stores with certificates made by the test: a private redis-server speaking
 * only TLS (rediss:// with --store-ca; one asking for a client certificate, --store-cert),
 * a private etcd member serving only TLS with --client-cert-auth (etcds://), and Postgres sslmode against the shared server
 * (no SSL: verify-full must fail, clearly) and against a cluster of our own with ssl=on
 * (verify-full verifies the chain and the host name; verify-ca the chain only).
 */
import { chownSync, copyFileSync, chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { readCertificates, readStoreTls } from '../../src/http/tls.js';
import { startServer } from '../../src/serve.js';
import { openStore, type Store } from '../../src/store/index.js';
import { pgConnection } from '../../src/store/sql/pg-ssl.js';
import { dropPostgresSchema, randomNamespace, SHARED_POSTGRES } from '../helpers/e2e.js';
import type { RedisServer } from '../helpers/redis-server.js';
import { startCluster, type Cluster } from '../helpers/sql-cluster.js';
import { startEtcdCluster, type EtcdCluster } from '../helpers/etcd-cluster.js';
import { makeTestCerts, startTlsRedis, type TestCerts } from '../helpers/tls-certs.js';

let certs: TestCerts;

beforeAll(() => {
  certs = makeTestCerts();
});

afterAll(() => certs?.remove());

async function grantOnce(store: Store): Promise<void> {
  const r = await store.tryAcquire({ key: `k-${randomNamespace('t')}`, owner: 'w1', ttlMs: 5_000 });
  expect(r.ok).toBe(true);
}

describe('Redis over TLS (rediss://)', () => {
  let redis: RedisServer;
  let url: string;

  beforeAll(async () => {
    ({ redis, url } = await startTlsRedis(certs));
  }, 30_000);

  afterAll(async () => {
    await redis?.stop();
  });

  it('opens with the CA, and grants', async () => {
    const store = await openStore(url, {
      allowVolatileRedis: true,
      namespace: randomNamespace('fgtls'),
      tlsCa: readCertificates(certs.ca.cert, 'store CA'),
    });
    try {
      await grantOnce(store);
    } finally {
      await store.close();
    }
  });

  it('refuses a server whose certificate chains to a CA it was not given', async () => {
    const opened = openStore(url, { allowVolatileRedis: true, namespace: randomNamespace('fgtls') });
    await expect(opened).rejects.toThrow(
      /cannot connect to redis at rediss:\/\/127\.0\.0\.1:\d+\/?: (UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT_LOCALLY)/,
    );
    const wrongCa = openStore(url, {
      allowVolatileRedis: true,
      tlsCa: readCertificates(certs.otherCa.cert, 'store CA'),
    });
    await expect(wrongCa).rejects.toThrow(/cannot connect to redis/);
  });

  it('fencegate serve with --store-ca', async () => {
    const server = await startServer(
      resolveConfig({
        flags: {
          store: url,
          storeCa: certs.ca.cert,
          storeNamespace: randomNamespace('fgtls'),
          allowVolatileRedis: true,
          listen: '127.0.0.1:0',
          control: '127.0.0.1:0',
          policies: 'test/fixtures/empty-policy.yaml',
        },
      }),
    );
    try {
      const ready = await fetch(`${server.control}/readyz`);
      expect(ready.status).toBe(200);
    } finally {
      await server.close();
    }
  }, 30_000);
});

/** --store-ca, --store-cert and --store-key of the test's certificates, read as serve reads them. */
const clientTls = () =>
  readStoreTls({ storeCa: certs.ca.cert, storeCert: certs.client.cert, storeKey: certs.client.key });

describe('Redis over TLS asking for a client certificate (--store-cert)', () => {
  let redis: RedisServer;
  let url: string;

  beforeAll(async () => {
    ({ redis, url } = await startTlsRedis(certs, true));
  }, 30_000);

  afterAll(async () => {
    await redis?.stop();
  });

  it('opens with the client certificate, and grants', async () => {
    const store = await openStore(url, {
      allowVolatileRedis: true,
      namespace: randomNamespace('fgtls'),
      ...clientTls(),
    });
    try {
      await grantOnce(store);
    } finally {
      await store.close();
    }
  });

  it('without one, or with one from another CA, is refused with one line', async () => {
    const tlsCa = readCertificates(certs.ca.cert, 'store CA');
    await expect(openStore(url, { allowVolatileRedis: true, tlsCa })).rejects.toThrow(
      /cannot connect to redis/,
    );
    const other = readStoreTls({
      storeCa: certs.ca.cert,
      storeCert: certs.otherClient.cert,
      storeKey: certs.otherClient.key,
    });
    await expect(openStore(url, { allowVolatileRedis: true, ...other })).rejects.toThrow(
      /cannot connect to redis/,
    );
  });
});

describe('etcd over TLS (etcds://) with --client-cert-auth', () => {
  let etcd: EtcdCluster;

  beforeAll(async () => {
    etcd = await startEtcdCluster(1, { certs, clientAuth: true });
  }, 60_000);

  afterAll(() => etcd?.stop());

  it('opens with the CA and the client certificate, and grants', async () => {
    expect(etcd.spec).toMatch(/^etcds:\/\/127\.0\.0\.1:\d+$/);
    const store = await openStore(etcd.spec, { namespace: randomNamespace('fgtls'), ...clientTls() });
    try {
      await grantOnce(store);
      expect((await store.health()).ok).toBe(true);
    } finally {
      await store.close();
    }
  }, 30_000);

  it('refuses to open without the client certificate, with a server chained to another CA, and in plain text', async () => {
    const open = (spec: string, tls: object) =>
      openStore(spec, { namespace: randomNamespace('fgtls'), ...tls });
    const files = (ca: string, client: { cert: string; key: string }) =>
      readStoreTls({ storeCa: ca, storeCert: client.cert, storeKey: client.key });
    // The member refuses the handshake (TLS alert 42, bad certificate).
    await expect(open(etcd.spec, { tlsCa: readCertificates(certs.ca.cert, 'store CA') })).rejects.toThrow(
      /cannot open the etcd store \(etcds 127\.0\.0\.1:\d+, namespace "fgtls[^"]*"\): .*bad certificate/,
    );
    await expect(open(etcd.spec, files(certs.ca.cert, certs.otherClient))).rejects.toThrow(/bad certificate/);
    // fencegate refuses the member's certificate.
    await expect(open(etcd.spec, files(certs.otherCa.cert, certs.client))).rejects.toThrow(
      /cannot open the etcd store .*unable to verify the first certificate/,
    );
    await expect(open(etcd.spec.replace(/^etcds:/, 'etcd:'), {})).rejects.toThrow(
      /cannot open the etcd store \(etcd /,
    );
  }, 60_000);

  it('fencegate serve with --store-ca, --store-cert and --store-key', async () => {
    const server = await startServer(
      resolveConfig({
        flags: {
          store: etcd.spec,
          storeCa: certs.ca.cert,
          storeCert: certs.client.cert,
          storeKey: certs.client.key,
          storeNamespace: randomNamespace('fgtls'),
          listen: '127.0.0.1:0',
          control: '127.0.0.1:0',
          policies: 'test/fixtures/empty-policy.yaml',
        },
      }),
    );
    try {
      const ready = await fetch(`${server.control}/readyz`);
      expect(ready.status).toBe(200);
      const acquired = await fetch(`${server.control}/v1/locks/tls-lock/acquire`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ owner: 'w1', ttlMs: 5000 }),
      });
      expect(acquired.status).toBe(200);
    } finally {
      await server.close();
    }
  }, 30_000);
});

describe('Postgres sslmode', () => {
  it('verify-full against a server without SSL fails with a clear error', async () => {
    const schema = randomNamespace('fgtls');
    const url = `${SHARED_POSTGRES}?sslmode=verify-full&sslrootcert=${certs.ca.cert}`;
    try {
      await expect(openStore(url, { namespace: schema })).rejects.toThrow(
        /postgres:\/\/127\.0\.0\.1:5432\/test.*The server does not support SSL connections/,
      );
    } finally {
      await dropPostgresSchema(schema);
    }
  });

  describe('a cluster of our own with ssl=on', () => {
    let cluster: Cluster;
    let keys: string;
    const base = () => `postgres://postgres@127.0.0.1:${cluster.port}/postgres`;
    /** The same server by an address its certificate does not name. */
    const otherAddress = () => `postgres://postgres@127.0.0.2:${cluster.port}/postgres`;

    beforeAll(async () => {
      // The server reads its certificate as the postgres user: a directory it owns, key mode 0600.
      keys = mkdtempSync(join(tmpdir(), 'fg-pgtls-'));
      chmodSync(keys, 0o755);
      copyFileSync(certs.server.cert, join(keys, 'server.pem'));
      copyFileSync(certs.server.key, join(keys, 'server.key'));
      chmodSync(join(keys, 'server.key'), 0o600);
      if (process.getuid?.() === 0) {
        const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
        const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
        for (const f of ['server.pem', 'server.key']) chownSync(join(keys, f), uid, gid);
      }
      cluster = await startCluster(
        {},
        {
          ssl: 'on',
          ssl_cert_file: join(keys, 'server.pem'),
          ssl_key_file: join(keys, 'server.key'),
          listen_addresses: "'127.0.0.1,127.0.0.2'",
        },
      );
    }, 120_000);

    afterAll(async () => {
      await cluster?.destroy();
      if (keys) rmSync(keys, { recursive: true, force: true });
    });

    /** Whether a connection made with pgConnection(url) is encrypted, per the server. */
    async function encrypted(url: string): Promise<boolean> {
      const client = new pg.Client({ ...pgConnection(url), connectionTimeoutMillis: 5_000 });
      await client.connect();
      try {
        const r = await client.query<{ ssl: boolean }>(
          'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
        );
        return r.rows[0]?.ssl === true;
      } finally {
        await client.end();
      }
    }

    it('verify-full: the store opens over TLS and grants', async () => {
      const url = `${base()}?sslmode=verify-full&sslrootcert=${certs.ca.cert}`;
      expect(await encrypted(url)).toBe(true);
      expect(await encrypted(base())).toBe(false);
      const store = await openStore(url, { namespace: randomNamespace('fgtls') });
      try {
        await grantOnce(store);
      } finally {
        await store.close();
      }
    }, 60_000);

    it('verify-full refuses another CA and a host name the certificate does not carry; verify-ca takes the latter', async () => {
      await expect(
        encrypted(`${base()}?sslmode=verify-full&sslrootcert=${certs.otherCa.cert}`),
      ).rejects.toMatchObject({
        code: expect.stringMatching(/SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE/),
      });
      await expect(
        encrypted(`${otherAddress()}?sslmode=verify-full&sslrootcert=${certs.ca.cert}`),
      ).rejects.toMatchObject({ code: 'ERR_TLS_CERT_ALTNAME_INVALID' });
      expect(await encrypted(`${otherAddress()}?sslmode=verify-ca&sslrootcert=${certs.ca.cert}`)).toBe(true);
      // require: encrypted, nothing verified (as libpq).
      expect(await encrypted(`${otherAddress()}?sslmode=require`)).toBe(true);
      // The store reports the refusal in one line naming the server.
      await expect(
        openStore(`${otherAddress()}?sslmode=verify-full&sslrootcert=${certs.ca.cert}`, {
          namespace: randomNamespace('fgtls'),
        }),
      ).rejects.toThrow(/postgres:\/\/127\.0\.0\.2:\d+\/postgres/);
    }, 60_000);
  });
});
