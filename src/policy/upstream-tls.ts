/**
 * An upstream's `tls` settings: the CA its certificate must chain to, the name it must
 * carry, and the gateway's own certificate for mTLS. The files (relative to the policy
 * file) are read and checked when the policy loads, so a bad one is a policy error at its
 * field, and a reload picks up replaced files.
 */
import { isAbsolute, join, dirname } from 'node:path';
import { digest, readCertificates, readKeyPair, TlsFileError } from '../http/tls.js';
import type { UpstreamTls } from './model.js';
import type { RawUpstreamTls } from './schema.js';

export type UpstreamTlsResult =
  { ok: true; tls: UpstreamTls | null } | { ok: false; errors: { field: string[]; message: string }[] };

/**
 * `raw` of the upstream declared in `policyFile`, whose compiled origin is `origin`
 * ("" for kinds that do not speak HTTP).
 */
export function compileUpstreamTls(
  raw: RawUpstreamTls | undefined,
  kind: string,
  origin: string,
  policyFile: string,
): UpstreamTlsResult {
  if (raw === undefined) return { ok: true, tls: null };
  const fail = (field: string[], message: string): UpstreamTlsResult => ({
    ok: false,
    errors: [{ field: ['tls', ...field], message }],
  });
  if (kind === 'postgres')
    return fail([], 'a postgres upstream takes its TLS settings in its url (sslmode, sslrootcert)');
  if (!origin.startsWith('https:')) return fail([], 'TLS settings need an https:// url');
  if ((raw.cert === undefined) !== (raw.key === undefined)) {
    const [given, missing] = raw.cert === undefined ? ['key', 'cert'] : ['cert', 'key'];
    return fail(
      [given],
      `needs "${missing}" too (the gateway's certificate and key, for mTLS to the upstream)`,
    );
  }
  const path = (p: string) => (isAbsolute(p) ? p : join(dirname(policyFile), p));
  let ca: string[] | null = null;
  let pair: { cert: string; key: string } | null = null;
  try {
    if (raw.ca !== undefined) ca = readCertificates(path(raw.ca), 'CA');
  } catch (err) {
    if (err instanceof TlsFileError) return fail(['ca'], err.message);
    throw err;
  }
  try {
    if (raw.cert !== undefined && raw.key !== undefined)
      pair = readKeyPair(path(raw.cert), path(raw.key), 'client');
  } catch (err) {
    if (err instanceof TlsFileError)
      return fail([err.file === path(raw.cert ?? '') ? 'cert' : 'key'], err.message);
    throw err;
  }
  const serverName = raw.serverName ?? null;
  const parts = [...(ca ?? []), '|', serverName ?? '', '|', pair?.cert ?? '', '|', pair?.key ?? ''];
  return {
    ok: true,
    tls: { ca, serverName, cert: pair?.cert ?? null, key: pair?.key ?? null, digest: digest(parts) },
  };
}
