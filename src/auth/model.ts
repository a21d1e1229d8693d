/**
 * Principals and what they may do: the validated auth file (src/auth/file.ts) as
 * frozen data, and the pure decisions over it: which principal a client certificate
 * is, and whether a principal may use a verb on a lock key. docs/security.md.
 */
import type { KeyHash } from './keys.js';

/**
 * What a grant allows on its lock-key prefix. `lease` is acquire + renew + release;
 * `admin` is every verb, and also /v1/status.
 */
export const VERBS = ['acquire', 'renew', 'release', 'lease', 'read', 'events', 'admin'] as const;
export type Verb = (typeof VERBS)[number];
/** The verbs a route asks for (`lease` and `admin` are shorthands in grants only). */
export type RouteVerb = 'acquire' | 'renew' | 'release' | 'read' | 'events';

/** Endpoints on the control listener that may be served without credentials. */
export const PUBLIC_ENDPOINTS = ['healthz', 'readyz', 'metrics', 'keys'] as const;
export type PublicEndpoint = (typeof PUBLIC_ENDPOINTS)[number];

/** Principal names: they prefix owners (`@<principal>/<owner>`), so no `/`. */
export const PRINCIPAL_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export interface Grant {
  verbs: readonly Verb[];
  /** Lock keys starting with this; '' for every key ("*" in the file). */
  prefix: string;
}

export interface CertificateMatch {
  /** SHA-256 fingerprint, upper-case hex with colons (as Node's fingerprint256), or null. */
  fingerprint: string | null;
  /** Subject common name, or null. Both given: both must match. */
  cn: string | null;
}

export interface Principal {
  name: string;
  keys: readonly KeyHash[];
  certificates: readonly CertificateMatch[];
  grants: readonly Grant[];
}

export interface AuthConfig {
  file: string;
  principals: readonly Principal[];
  /** Endpoints served without credentials on the control listener. */
  public: ReadonlySet<PublicEndpoint>;
}

function covers(granted: Verb, wanted: RouteVerb): boolean {
  if (granted === wanted || granted === 'admin') return true;
  return granted === 'lease' && (wanted === 'acquire' || wanted === 'renew' || wanted === 'release');
}

/** Whether `principal` may `verb` the lock `key`. */
export function may(principal: Principal, verb: RouteVerb, key: string): boolean {
  return principal.grants.some((g) => key.startsWith(g.prefix) && g.verbs.some((v) => covers(v, verb)));
}

/**
 * The prefixes under which `principal` may `verb` ('' covers every key). Listings
 * (GET /v1/locks, the events) show only keys under one of them.
 */
export function prefixesFor(principal: Principal, verb: RouteVerb): string[] {
  return principal.grants.filter((g) => g.verbs.some((v) => covers(v, verb))).map((g) => g.prefix);
}

/** Whether `key` lies under one of `prefixes`. */
export function under(prefixes: readonly string[], key: string): boolean {
  return prefixes.some((p) => key.startsWith(p));
}

/** /v1/status (routes, upstreams, store health; no lock state): `read` or `admin` on any prefix. */
export function mayReadStatus(principal: Principal): boolean {
  return principal.grants.some((g) => g.verbs.includes('read') || g.verbs.includes('admin'));
}

/** The fields of a verified peer certificate that identify it (a subset of Node's PeerCertificate). */
export interface PeerCertificateLike {
  fingerprint256?: string;
  subject?: { CN?: string | string[] } | null;
}

/** `AB:CD:…` (Node's form) from hex with or without colons, any case; null when it is not 32 bytes. */
export function normaliseFingerprint(text: string): string | null {
  const hex = text.replace(/:/g, '').toUpperCase();
  if (!/^[0-9A-F]{64}$/.test(hex)) return null;
  return hex.match(/../g)?.join(':') ?? null;
}

/**
 * The principal a client certificate identifies, or null. Pure: the caller passes the
 * certificate of a TLS socket that verified it against the configured client CA
 * (src/auth/authenticate.ts). An entry matches when every field it names matches; a
 * certificate with several CNs matches none by CN (which one would be meant?).
 */
export function principalForCertificate(
  cert: PeerCertificateLike | null | undefined,
  principals: readonly Principal[],
): Principal | null {
  if (cert === null || cert === undefined) return null;
  const fingerprint =
    typeof cert.fingerprint256 === 'string' ? normaliseFingerprint(cert.fingerprint256) : null;
  const cnField = cert.subject?.CN;
  const cn = typeof cnField === 'string' ? cnField : null;
  for (const p of principals) {
    for (const m of p.certificates) {
      if (m.fingerprint !== null && m.fingerprint !== fingerprint) continue;
      if (m.cn !== null && m.cn !== cn) continue;
      if (m.fingerprint === null && m.cn === null) continue;
      return p;
    }
  }
  return null;
}

/**
 * What a bound owner starts with. Owners sent without a principal may not start with it
 * (the issuer refuses them, src/issuer/validate.ts), so a lease whose recorded owner has
 * it was taken by the principal it names, and one without it by no principal: nothing is
 * guessed from the owner's text (`alice/x` sent before an auth file existed names nobody).
 */
export const BOUND_OWNER_MARK = '@';

/** The owner recorded for a lease taken by `principal`: `@<principal>/<owner>`. */
export function boundOwner(principal: string, owner: string): string {
  return `${BOUND_OWNER_MARK}${principal}/${owner}`;
}

/** The principal a recorded owner is bound to, or null for a lease taken without one. */
export function ownerPrincipal(recorded: string | null): string | null {
  if (recorded === null || !recorded.startsWith(BOUND_OWNER_MARK)) return null;
  const slash = recorded.indexOf('/');
  return slash <= 1 ? null : recorded.slice(1, slash);
}
