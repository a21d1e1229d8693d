/**
 * The auth file (`--auth FILE`, YAML or JSON): principals, their credentials and
 * grants. Parsed with the policy loader's located YAML reader, so every error names
 * file, line, column and field; unknown fields are refused; the result is frozen.
 * docs/security.md, "Authentication and authorisation", is the reference.
 */
import { readFileSync } from 'node:fs';
import { formatPolicyError, type FieldPath, type PolicyError } from '../policy/errors.js';
import { PolicySource } from '../policy/source.js';
import { parseKeyHash } from './keys.js';
import {
  PRINCIPAL_NAME,
  PUBLIC_ENDPOINTS,
  VERBS,
  normaliseFingerprint,
  type AuthConfig,
  type CertificateMatch,
  type Grant,
  type Principal,
  type PublicEndpoint,
  type Verb,
} from './model.js';

export class AuthFileError extends Error {
  constructor(readonly errors: PolicyError[]) {
    super(errors.map(formatPolicyError).join('\n'));
    this.name = 'AuthFileError';
  }
}

/** Reads and validates an auth file; throws AuthFileError naming file, line and field. */
export function loadAuthFile(path: string): AuthConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new AuthFileError([
      { file: path, line: 0, column: 0, field: '', message: `cannot read the auth file (${code})` },
    ]);
  }
  return parseAuthText(path, text);
}

type Obj = Record<string, unknown>;

/** Validates auth file text (YAML; JSON is YAML too). */
export function parseAuthText(file: string, text: string): AuthConfig {
  const parsed = PolicySource.parse(file, text);
  if (!parsed.ok) throw new AuthFileError(parsed.errors);
  const source = parsed.source;
  const data = source.toData();
  if (!data.ok) throw new AuthFileError(data.errors);
  const errors: PolicyError[] = [];
  const fail = (path: FieldPath, message: string, anchor: 'key' | 'value' = 'value') => {
    errors.push(source.error(path, message, anchor));
  };
  const root = data.data;
  if (!isObj(root)) {
    fail([], 'the auth file must be a mapping with "principals"');
    throw new AuthFileError(errors);
  }
  onlyKeys(root, [], ['version', 'principals', 'public'], fail);
  if (root.version !== undefined && root.version !== 1) fail(['version'], 'must be 1');

  let publicSet = new Set<PublicEndpoint>(PUBLIC_ENDPOINTS);
  if (root.public !== undefined) {
    publicSet = new Set();
    if (!Array.isArray(root.public)) fail(['public'], `must be a list of ${PUBLIC_ENDPOINTS.join(', ')}`);
    else
      root.public.forEach((v, i) => {
        if (!(PUBLIC_ENDPOINTS as readonly unknown[]).includes(v))
          fail(['public', i], `must be one of ${PUBLIC_ENDPOINTS.join(', ')}`);
        else publicSet.add(v as PublicEndpoint);
      });
  }

  const principals: Principal[] = [];
  const indexes: number[] = [];
  if (!Array.isArray(root.principals) || root.principals.length === 0) {
    fail(['principals'], 'must be a non-empty list of principals');
  } else {
    root.principals.forEach((raw, i) => {
      const p = principal(raw, ['principals', i], fail);
      if (p === null) return;
      principals.push(p);
      indexes.push(i);
    });
  }
  checkUnique(principals, indexes, fail);
  if (errors.length > 0) throw new AuthFileError(errors);
  return deepFreeze({ file, principals, public: publicSet });
}

type Fail = (path: FieldPath, message: string, anchor?: 'key' | 'value') => void;

function principal(raw: unknown, at: FieldPath, fail: Fail): Principal | null {
  if (!isObj(raw)) {
    fail(at, 'a principal is a mapping with name, keys and/or certificates, and grants');
    return null;
  }
  onlyKeys(raw, at, ['name', 'keys', 'certificates', 'grants'], fail);
  const name = raw.name;
  if (typeof name !== 'string' || !PRINCIPAL_NAME.test(name)) {
    fail([...at, 'name'], 'must be 1–64 characters of letters, digits, ".", "_" or "-" (no "/")');
  }
  const keys: Principal['keys'][number][] = [];
  if (raw.keys !== undefined) {
    if (!Array.isArray(raw.keys))
      fail([...at, 'keys'], 'must be a list of hashed keys (fencegate auth hash)');
    else
      raw.keys.forEach((k, j) => {
        const h = typeof k === 'string' ? parseKeyHash(k) : 'must be a string';
        if (typeof h === 'string') fail([...at, 'keys', j], h);
        else keys.push(h);
      });
  }
  const certificates: CertificateMatch[] = [];
  if (raw.certificates !== undefined) {
    if (!Array.isArray(raw.certificates)) fail([...at, 'certificates'], 'must be a list');
    else raw.certificates.forEach((c, j) => certificate(c, [...at, 'certificates', j], fail, certificates));
  }
  const offered = [raw.keys, raw.certificates].reduce<number>(
    (n, v) => n + (Array.isArray(v) ? v.length : 0),
    0,
  );
  if (offered === 0) {
    fail(at, 'a principal needs at least one credential: keys or certificates');
  }
  const grants: Grant[] = [];
  if (!Array.isArray(raw.grants)) fail([...at, 'grants'], 'must be a list of {verbs, prefix}');
  else raw.grants.forEach((g, j) => grant(g, [...at, 'grants', j], fail, grants));
  return typeof name === 'string' ? { name, keys, certificates, grants } : null;
}

function certificate(raw: unknown, at: FieldPath, fail: Fail, out: CertificateMatch[]): void {
  if (!isObj(raw)) {
    fail(at, 'a certificate match is a mapping with fingerprint and/or cn');
    return;
  }
  onlyKeys(raw, at, ['fingerprint', 'cn'], fail);
  let fingerprint: string | null = null;
  if (raw.fingerprint !== undefined) {
    fingerprint = typeof raw.fingerprint === 'string' ? normaliseFingerprint(raw.fingerprint) : null;
    if (fingerprint === null)
      fail([...at, 'fingerprint'], 'must be a SHA-256 fingerprint: 64 hex digits, colons allowed');
  }
  let cn: string | null = null;
  if (raw.cn !== undefined) {
    if (typeof raw.cn !== 'string' || raw.cn.length === 0) fail([...at, 'cn'], 'must be a non-empty string');
    else cn = raw.cn;
  }
  if (raw.fingerprint === undefined && raw.cn === undefined) fail(at, 'needs fingerprint and/or cn');
  else if (fingerprint !== null || cn !== null) out.push({ fingerprint, cn });
}

function grant(raw: unknown, at: FieldPath, fail: Fail, out: Grant[]): void {
  if (!isObj(raw)) {
    fail(at, 'a grant is a mapping with verbs and prefix');
    return;
  }
  onlyKeys(raw, at, ['verbs', 'prefix'], fail);
  const verbs: Verb[] = [];
  if (!Array.isArray(raw.verbs) || raw.verbs.length === 0) {
    fail([...at, 'verbs'], `must be a non-empty list of ${VERBS.join(', ')}`);
  } else {
    raw.verbs.forEach((v, k) => {
      if ((VERBS as readonly unknown[]).includes(v)) verbs.push(v as Verb);
      else fail([...at, 'verbs', k], `unknown verb; one of ${VERBS.join(', ')}`);
    });
  }
  if (typeof raw.prefix !== 'string') {
    fail([...at, 'prefix'], 'must be a lock-key prefix, or "*" for every key');
    return;
  }
  out.push({ verbs, prefix: raw.prefix === '*' ? '' : raw.prefix });
}

/** One name, one key and one certificate match per principal: a credential names one principal. */
function checkUnique(principals: Principal[], indexes: number[], fail: Fail): void {
  const names = new Map<string, number>();
  const keys = new Map<string, number>();
  const certs = new Map<string, number>();
  principals.forEach((p, n) => {
    const index = indexes[n] as number;
    const seen = names.get(p.name);
    if (seen !== undefined) fail(['principals', index, 'name'], `"${p.name}" is also principals[${seen}]`);
    else names.set(p.name, index);
    p.keys.forEach((k, j) => {
      const other = keys.get(k.keyId);
      if (other !== undefined)
        fail(['principals', index, 'keys', j], `the same key id (or salt) as principals[${other}]`);
      else keys.set(k.keyId, index);
    });
    p.certificates.forEach((c, j) => {
      const id = `${c.fingerprint ?? ''}|${c.cn ?? ''}`;
      const other = certs.get(id);
      if (other !== undefined)
        fail(['principals', index, 'certificates', j], `the same certificate match as principals[${other}]`);
      else certs.set(id, index);
    });
  });
}

function onlyKeys(o: Obj, at: FieldPath, allowed: readonly string[], fail: Fail): void {
  for (const k of Object.keys(o))
    if (!allowed.includes(k)) fail([...at, k], `unknown field; allowed: ${allowed.join(', ')}`, 'key');
}

function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function deepFreeze<T>(o: T): T {
  if (Buffer.isBuffer(o)) return o; // typed arrays cannot be frozen
  if (o instanceof Set) return Object.freeze(o);
  for (const v of Object.values(o as object)) if (v && typeof v === 'object') deepFreeze(v);
  return Object.freeze(o);
}
