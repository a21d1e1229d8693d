/**
 * Certificates made for a test with the openssl CLI, in a temp directory: two CAs (the
 * trusted one and an "other" one for the wrong-CA cases), server certificates for
 * 127.0.0.1 / localhost (two, to see a reload swap them), one for another name only,
 * and client certificates from each CA. EC P-256 keys, valid for two days.
 */
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './procs.js';
import { startRedisServer, type RedisServer } from './redis-server.js';

export interface KeyPairFiles {
  cert: string;
  key: string;
}

export interface TestCerts {
  dir: string;
  /** The trusted CA (cert and key files). */
  ca: KeyPairFiles;
  /** Another CA nobody trusts. */
  otherCa: KeyPairFiles;
  /** Server certificates from `ca` for IP 127.0.0.1 and DNS localhost. */
  server: KeyPairFiles;
  server2: KeyPairFiles;
  /**
   * A server certificate also usable as a client's (both extended key usages), as etcd's
   * gRPC gateway needs with --client-cert-auth (it dials its own port with it).
   */
  dualUse: KeyPairFiles;
  /** From `ca`, for the name other.example only (host name check fails, chain passes). */
  wrongName: KeyPairFiles;
  /** Client certificates from `ca` and from `otherCa`. */
  client: KeyPairFiles;
  otherClient: KeyPairFiles;
  /** SHA-256 fingerprint (colon-separated hex, as Node's getPeerCertificate().fingerprint256). */
  fingerprint(certFile: string): string;
  read(file: string): string;
  remove(): void;
}

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function makeCa(dir: string, name: string): KeyPairFiles {
  const files = { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
  openssl(
    [
      'req',
      '-x509',
      ...EC,
      '-keyout',
      files.key,
      '-out',
      files.cert,
      '-days',
      '2',
      '-subj',
      `/CN=fencegate test ${name}`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  return files;
}

let serial = 1000;

function makeLeaf(dir: string, name: string, ca: KeyPairFiles, san: string, usage: string): KeyPairFiles {
  const files = { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
  const csr = join(dir, `${name}.csr`);
  const ext = join(dir, `${name}.ext`);
  writeFileSync(
    ext,
    `basicConstraints=CA:FALSE\n${san ? `subjectAltName=${san}\n` : ''}extendedKeyUsage=${usage}\n`,
  );
  openssl(['req', ...EC, '-keyout', files.key, '-out', csr, '-subj', `/CN=${name}`], dir);
  openssl(
    [
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      ca.cert,
      '-CAkey',
      ca.key,
      '-out',
      files.cert,
      '-days',
      '2',
      '-set_serial',
      String((serial += 1)),
      '-extfile',
      ext,
    ],
    dir,
  );
  // Postgres refuses a key file others can read.
  chmodSync(files.key, 0o600);
  return files;
}

export function makeTestCerts(): TestCerts {
  const dir = mkdtempSync(join(tmpdir(), 'fg-tls-'));
  const ca = makeCa(dir, 'ca');
  const otherCa = makeCa(dir, 'other-ca');
  const local = 'IP:127.0.0.1,DNS:localhost';
  return {
    dir,
    ca,
    otherCa,
    server: makeLeaf(dir, 'server', ca, local, 'serverAuth'),
    server2: makeLeaf(dir, 'server2', ca, local, 'serverAuth'),
    dualUse: makeLeaf(dir, 'dual-use', ca, local, 'serverAuth,clientAuth'),
    wrongName: makeLeaf(dir, 'wrong-name', ca, 'DNS:other.example', 'serverAuth'),
    client: makeLeaf(dir, 'client', ca, '', 'clientAuth'),
    otherClient: makeLeaf(dir, 'other-client', otherCa, '', 'clientAuth'),
    fingerprint: (certFile) => new X509Certificate(readFileSync(certFile)).fingerprint256,
    read: (file) => readFileSync(file, 'utf8'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export interface HttpsAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** fingerprint256 of the certificate the server presented on this connection. */
  fingerprint: string;
  /** The request went over a kept-alive connection opened before. */
  reused: boolean;
}

/**
 * One request over node:https, trusting `ca` (a PEM file) and presenting `client` when
 * given; rejects when the handshake is refused. Pass `agent` to keep connections alive.
 */
export async function httpsRequest(
  url: string,
  options: {
    ca: string;
    client?: KeyPairFiles;
    agent?: import('node:https').Agent;
    method?: string;
    body?: string;
    headers?: Record<string, string>;
  },
): Promise<HttpsAnswer> {
  const { request } = await import('node:https');
  const tlsOptions = {
    ca: readFileSync(options.ca),
    ...(options.client
      ? { cert: readFileSync(options.client.cert), key: readFileSync(options.client.key) }
      : {}),
  };
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: options.method ?? 'GET',
        headers: options.headers ?? {},
        ...(options.agent ? { agent: options.agent } : { agent: false, ...tlsOptions }),
      },
      (res) => {
        const fingerprint = (res.socket as import('node:tls').TLSSocket).getPeerCertificate().fingerprint256;
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('error', reject);
        res.on('end', () => {
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            text,
            fingerprint,
            reused: req.reusedSocket,
          });
        });
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

/** A keep-alive https agent trusting `ca` (and presenting `client`). */
export async function keepAliveAgent(ca: string, client?: KeyPairFiles): Promise<import('node:https').Agent> {
  const { Agent } = await import('node:https');
  return new Agent({
    keepAlive: true,
    maxSockets: 1,
    ca: readFileSync(ca),
    ...(client ? { cert: readFileSync(client.cert), key: readFileSync(client.key) } : {}),
  });
}

/**
 * A redis-server of the test's own that speaks TLS only (its plain port off), with the
 * server certificate of `certs`; clients need no certificate unless `clientAuth` (then one
 * from the test CA: Redis's default `tls-auth-clients yes`). Stop it with `redis.stop()`.
 */
export async function startTlsRedis(
  certs: TestCerts,
  clientAuth = false,
): Promise<{ redis: RedisServer; url: string }> {
  const tlsPort = await freePort();
  const redis = await startRedisServer([
    '--port',
    '0',
    '--tls-port',
    String(tlsPort),
    '--tls-cert-file',
    certs.server.cert,
    '--tls-key-file',
    certs.server.key,
    '--tls-ca-cert-file',
    certs.ca.cert,
    '--tls-auth-clients',
    clientAuth ? 'yes' : 'no',
  ]);
  return { redis, url: `rediss://127.0.0.1:${tlsPort}` };
}
