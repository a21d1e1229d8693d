/**
 * TLS material from files, for the listeners (certificate, key, optional client CA for
 * mTLS), the upstreams and the stores (CA bundles). Every file is read and checked here
 * (PEM parses, the key matches the certificate) so that a bad file is one error naming
 * it, at start or at reload, never a handshake failure later. A listener's files are
 * re-read by ListenerTls.reload() (SIGHUP): new handshakes get the new context, open
 * connections keep theirs, and a bad file keeps the old one.
 */
import { createHash, createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext, TLSSocket, type PeerCertificate, type SecureContextOptions } from 'node:tls';
import type { Server as TlsServer } from 'node:tls';
import { HTTP_SERVER_OPTIONS } from './problems.js';

/** A TLS file that cannot be used; the message names the file and what is wrong. */
export class TlsFileError extends Error {
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(message);
    this.name = 'TlsFileError';
  }
}

/** A listener's TLS files: certificate chain and key (PEM), and the CA that client certificates must chain to. */
export interface ListenerTlsFiles {
  cert: string;
  key: string;
  /** Set: mTLS, a client without a certificate from this CA is refused at the handshake. */
  clientCa: string | null;
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

function readText(file: string, what: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new TlsFileError(file, `${what} ${file}: cannot read (${code})`);
  }
}

/**
 * The PEM certificates in `file` (a bundle may hold several), each checked to parse.
 * `what` says what the file is for, in errors ("upstream CA", "client CA").
 */
export function readCertificates(file: string, what: string): string[] {
  const text = readText(file, what);
  const blocks = text.match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0) throw new TlsFileError(file, `${what} ${file}: no PEM certificate in it`);
  blocks.forEach((pem, i) => {
    try {
      new X509Certificate(pem);
    } catch {
      throw new TlsFileError(file, `${what} ${file}: certificate #${i + 1} does not parse`);
    }
  });
  return blocks;
}

/** A PEM private key, checked to parse (an encrypted key is refused: there is no passphrase to give). */
export function readPrivateKey(file: string, what: string): string {
  const text = readText(file, what);
  try {
    createPrivateKey(text);
  } catch {
    throw new TlsFileError(file, `${what} ${file}: not an unencrypted PEM private key`);
  }
  return text;
}

/** A certificate chain and its key, checked to belong together. */
export function readKeyPair(certFile: string, keyFile: string, what: string): { cert: string; key: string } {
  const cert = readCertificates(certFile, `${what} certificate`).join('\n');
  const key = readPrivateKey(keyFile, `${what} key`);
  try {
    createSecureContext({ cert, key });
  } catch {
    throw new TlsFileError(keyFile, `${what} key ${keyFile}: does not match the certificate in ${certFile}`);
  }
  return { cert, key };
}

/** What fencegate presents to and trusts of a TLS store (rediss://, etcds://): Store options. */
export interface StoreTlsFiles {
  /** The CA certificates (PEM) the store's certificate must chain to; absent: the built-in roots. */
  tlsCa?: readonly string[];
  /** The client certificate chain and key, for a store that asks for one. */
  tlsClient?: { cert: string; key: string };
}

/** The store's TLS files (--store-ca, --store-cert, --store-key), read and checked; one home for serve and `epoch bump`. */
export function readStoreTls(files: {
  storeCa: string | null;
  storeCert: string | null;
  storeKey: string | null;
}): StoreTlsFiles {
  return {
    ...(files.storeCa === null ? {} : { tlsCa: readCertificates(files.storeCa, 'store CA') }),
    ...(files.storeCert === null || files.storeKey === null
      ? {}
      : { tlsClient: readKeyPair(files.storeCert, files.storeKey, 'store client') }),
  };
}

/** Server options for a listener's files: cert and key, and with a client CA, mTLS enforced at the handshake. */
export function listenerTlsOptions(
  files: ListenerTlsFiles,
  what: string,
): SecureContextOptions & {
  requestCert: boolean;
  rejectUnauthorized: boolean;
} {
  const pair = readKeyPair(files.cert, files.key, what);
  if (files.clientCa === null) return { ...pair, requestCert: false, rejectUnauthorized: false };
  const ca = readCertificates(files.clientCa, `${what} client CA`);
  return { ...pair, ca, requestCert: true, rejectUnauthorized: true };
}

/** SHA-256 fingerprint of a PEM text, for telling whether a file changed (never logged as a secret). */
export function digest(text: string | readonly string[]): string {
  const h = createHash('sha256');
  for (const part of typeof text === 'string' ? [text] : text) h.update(part).update('\0');
  return h.digest('hex');
}

export type TlsReloadResult = { ok: true; changed: boolean } | { ok: false; error: TlsFileError };

/**
 * One listener's TLS: the options it was started with, and reload(), which re-reads the
 * files and swaps the server's secure context when they are good.
 */
export class ListenerTls {
  private server: TlsServer | null = null;
  private current: string;
  /** The options the listener is created with (https.createServer). */
  readonly initial: ReturnType<typeof listenerTlsOptions>;

  constructor(
    /** "data listener" or "control listener", for messages. */
    readonly what: string,
    readonly files: ListenerTlsFiles,
  ) {
    this.initial = listenerTlsOptions(files, what);
    this.current = fingerprintOf(this.initial);
  }

  /**
   * The server whose context reload() replaces. Refused handshakes (no client certificate,
   * another CA, plain HTTP) are logged at debug: at info a scanner could flood the log.
   */
  attach(server: TlsServer, log: { debug(obj: object, msg: string): void }): void {
    this.server = server;
    server.on('tlsClientError', (err: NodeJS.ErrnoException, socket: TLSSocket) => {
      log.debug({ code: err.code ?? null, client: socket.remoteAddress ?? null }, 'TLS handshake refused');
    });
  }

  /**
   * Re-reads the files. Good: the server's context is replaced (setSecureContext:
   * connections already open keep theirs). Bad: the old context stays and the error names the file.
   */
  reload(): TlsReloadResult {
    let next: ReturnType<typeof listenerTlsOptions>;
    try {
      next = listenerTlsOptions(this.files, this.what);
    } catch (err) {
      if (err instanceof TlsFileError) return { ok: false, error: err };
      throw err;
    }
    const fingerprint = fingerprintOf(next);
    const changed = fingerprint !== this.current;
    // requestCert/rejectUnauthorized are the server's options, fixed at start: whether a
    // client CA is configured cannot change on reload (the settings are not re-read).
    if (changed)
      this.server?.setSecureContext({ cert: next.cert, key: next.key, ...(next.ca ? { ca: next.ca } : {}) });
    this.current = fingerprint;
    return { ok: true, changed };
  }
}

function fingerprintOf(o: SecureContextOptions): string {
  const ca = o.ca === undefined ? [] : Array.isArray(o.ca) ? (o.ca as string[]) : [String(o.ca)];
  return digest([String(o.cert), String(o.key), ...ca]);
}

/**
 * The peer's certificate on a connection, when the peer presented one and it was
 * verified against the listener's client CA; null otherwise (plain HTTP, no client CA,
 * no certificate). For mapping mTLS clients to principals: pass `request.raw.socket`.
 */
export function peerCertificate(socket: unknown): PeerCertificate | null {
  // Duck-typed: any TLS socket (or a test's stand-in) that verified its peer.
  const tls = socket as Partial<TLSSocket> | null;
  if (tls?.encrypted !== true || tls.authorized !== true || typeof tls.getPeerCertificate !== 'function')
    return null;
  const cert = tls.getPeerCertificate();
  // An empty object means no certificate was presented.
  return cert !== null && typeof cert === 'object' && Object.keys(cert).length > 0 ? cert : null;
}

/**
 * The fastify `https` option for a listener with TLS (with the same HTTP server options
 * as a plain listener), or nothing. Call `tls.attach(app.server)` once the instance exists.
 */
export function httpsOption(tls: ListenerTls | null | undefined): { https?: object } {
  if (tls == null) return {};
  return { https: { ...HTTP_SERVER_OPTIONS, ...tls.initial } };
}

/**
 * A CA bundle file followed on reload (--upstream-ca): `version` moves when its
 * certificates change, so whoever built connections with it can rebuild them.
 */
export class CaBundle {
  private certificates: readonly string[];
  private fingerprint: string;
  private generation = 0;

  constructor(
    readonly file: string,
    /** What it is for, in errors ("upstream CA"). */
    readonly what: string,
  ) {
    this.certificates = readCertificates(file, what);
    this.fingerprint = digest(this.certificates);
  }

  get certs(): readonly string[] {
    return this.certificates;
  }

  get version(): number {
    return this.generation;
  }

  /** Re-reads the file; a bad one keeps the certificates in use. */
  reload(): TlsReloadResult {
    let next: string[];
    try {
      next = readCertificates(this.file, this.what);
    } catch (err) {
      if (err instanceof TlsFileError) return { ok: false, error: err };
      throw err;
    }
    const fingerprint = digest(next);
    const changed = fingerprint !== this.fingerprint;
    if (changed) {
      this.certificates = next;
      this.fingerprint = fingerprint;
      this.generation += 1;
    }
    return { ok: true, changed };
  }
}
