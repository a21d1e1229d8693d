/**
 * TLS to Postgres from libpq's URL parameters (`sslmode`, `sslrootcert`, `sslcert`,
 * `sslkey`), applied by us rather than by node-postgres: its parser gives `require` and
 * `verify-ca` the meaning of `verify-full` (with a deprecation warning) and reads the
 * files with a bare ENOENT on failure. Here each mode means what libpq documents, the
 * files are checked with errors naming them, and the parameters are removed from the
 * URL handed to `pg` (whose parsed URL would otherwise override the `ssl` we give it).
 *
 * | sslmode            | encrypted | certificate chain checked  | host name checked |
 * | ------------------ | --------- | -------------------------- | ----------------- |
 * | (none), disable    | no        | –                          | –                 |
 * | require            | yes       | no (yes with sslrootcert)  | no                |
 * | verify-ca          | yes       | yes                        | no                |
 * | verify-full        | yes       | yes                        | yes               |
 *
 * The chain is checked against `sslrootcert` (a PEM bundle), or Node's built-in roots
 * when it is absent or `system`. `allow` and `prefer` (plain text when the server has no
 * TLS) are refused: a store connection that may silently go unencrypted is not offered.
 */
import type { ConnectionOptions } from 'node:tls';
import { readCertificates, readKeyPair } from '../../http/tls.js';

export const SSL_MODES = ['disable', 'require', 'verify-ca', 'verify-full'] as const;
export type SslMode = (typeof SSL_MODES)[number];

const SSL_PARAMS = ['sslmode', 'sslrootcert', 'sslcert', 'sslkey'] as const;

/** Why the URL's TLS parameters cannot be used (checked without reading files), or null. */
export function sslParamsProblem(url: string): string | null {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return null; // not a URL: pg reports it
  }
  const q = u.searchParams;
  if (q.has('ssl')) return 'use sslmode=require|verify-ca|verify-full instead of ssl= in the URL';
  const mode = q.get('sslmode');
  if (mode !== null && !(SSL_MODES as readonly string[]).includes(mode)) {
    const why = mode === 'prefer' || mode === 'allow' ? ' (it falls back to plain text)' : '';
    return `sslmode=${mode} is not supported${why}; use ${SSL_MODES.join(', ')}`;
  }
  const files = SSL_PARAMS.filter((p) => p !== 'sslmode' && q.has(p));
  if ((mode === null || mode === 'disable') && files.length > 0)
    return `${files.join(', ')} given without sslmode=require|verify-ca|verify-full`;
  if (q.has('sslcert') !== q.has('sslkey')) return 'sslcert and sslkey go together';
  return null;
}

/**
 * The connection string without the TLS parameters, and the `ssl` option for `pg`.
 * Throws RangeError (bad parameters) or TlsFileError (a file that cannot be used, named).
 */
export function pgConnection(url: string): { connectionString: string; ssl: false | ConnectionOptions } {
  const problem = sslParamsProblem(url);
  if (problem !== null) throw new RangeError(problem);
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return { connectionString: url, ssl: false };
  }
  const q = u.searchParams;
  const mode = (q.get('sslmode') ?? 'disable') as SslMode;
  const rootcert = q.get('sslrootcert');
  const cert = q.get('sslcert');
  const key = q.get('sslkey');
  if (!SSL_PARAMS.some((p) => q.has(p))) return { connectionString: url, ssl: false };
  for (const p of SSL_PARAMS) q.delete(p);
  const connectionString = u.toString();
  if (mode === 'disable') return { connectionString, ssl: false };

  const ssl: ConnectionOptions = {};
  if (rootcert !== null && rootcert !== 'system') ssl.ca = readCertificates(rootcert, 'sslrootcert');
  if (cert !== null && key !== null) Object.assign(ssl, readKeyPair(cert, key, 'postgres client'));
  // libpq: require with a root certificate behaves as verify-ca.
  const verifyChain = mode !== 'require' || rootcert !== null;
  ssl.rejectUnauthorized = verifyChain;
  if (mode !== 'verify-full') ssl.checkServerIdentity = () => undefined;
  return { connectionString, ssl };
}
