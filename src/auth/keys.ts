/**
 * API keys: made, hashed and verified. A key is stored only as a self-describing scrypt
 * hash, `scrypt$N$r$p$<salt>$<hash>` (base64url, no padding), so a leaked auth file
 * gives nobody a usable key. docs/security.md, "Authentication and authorisation".
 *
 * Keys that fencegate makes (`fencegate auth hash`) carry their hash's salt in clear:
 * `fgk_<salt, 22 chars><secret, 43 chars>`. The salt is not secret (it is in the auth
 * file too); carrying it lets the verifier find the one hash to check by its salt,
 * so a request with a wrong key costs at most one KDF run, however many keys are
 * configured. A key of another form (hashed from stdin) must carry an id of its own,
 * `<id>.<secret>`, which its stored hash repeats (`scrypt$N$r$p$<salt>$<hash>$<id>`): it
 * too names its one candidate hash. A key of neither form names no hash and is refused
 * without a KDF run.
 */
import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

export const KEY_PREFIX = 'fgk_';
const SALT_BYTES = 16;
const SECRET_BYTES = 32;
const HASH_BYTES = 32;
const B64 = '[A-Za-z0-9_-]';
const GENERATED_KEY = new RegExp(`^${KEY_PREFIX}(${B64}{22})(${B64}{43})$`);
/** A key of another form: a public id (1–32 base64url characters), ".", then the secret. */
const CUSTOM_KEY = new RegExp(`^(${B64}{1,32})\\.([\\x21-\\x7e]+)$`);
const KEY_ID = new RegExp(`^${B64}{1,32}$`);

/** scrypt cost: 16 MiB and a few tens of ms per run. Keys are random, so this is ample. */
export const DEFAULT_SCRYPT = { N: 16384, r: 8, p: 1 } as const;

/** Bounds accepted in a stored hash: a hostile or mistyped file cannot ask for a huge KDF. */
const LIMITS = { N: [1024, 1 << 20], r: [1, 32], p: [1, 16] } as const;

/** The shortest secret of a key of another form `auth hash` accepts (a generated key's is 43 characters). */
export const MIN_KEY_LENGTH = 24;

export interface KeyHash {
  N: number;
  r: number;
  p: number;
  salt: Buffer;
  hash: Buffer;
  /** The salt as written (base64url). */
  saltText: string;
  /** What a presented key names to find this hash by: a generated key's salt, or the id of a key of another form. */
  keyId: string;
}

/** A new random key and its stored form. The key is shown once; only the hash is kept. */
export async function generateApiKey(): Promise<{ key: string; hash: string }> {
  const salt = randomBytes(SALT_BYTES);
  const key = `${KEY_PREFIX}${salt.toString('base64url')}${randomBytes(SECRET_BYTES).toString('base64url')}`;
  return { key, hash: await hashApiKey(key) };
}

/**
 * The stored form of `key`. A generated key is hashed with the salt it carries; any
 * other key with a new random salt.
 */
export async function hashApiKey(key: string): Promise<string> {
  const keyProblem = apiKeyProblem(key);
  if (keyProblem !== null) throw new TypeError(keyProblem);
  const carried = saltOf(key);
  const salt = carried === null ? randomBytes(SALT_BYTES) : Buffer.from(carried, 'base64url');
  const { N, r, p } = DEFAULT_SCRYPT;
  const hash = await derive(key, salt, HASH_BYTES, { N, r, p });
  const stored = `scrypt$${N}$${r}$${p}$${salt.toString('base64url')}$${hash.toString('base64url')}`;
  return carried === null ? `${stored}$${keyIdOf(key)}` : stored;
}

/** Why `key` cannot be an API key, or null. */
export function apiKeyProblem(key: string): string | null {
  if (!/^[\x21-\x7e]+$/.test(key)) return 'an API key is printable ASCII without spaces';
  if (saltOf(key) !== null) return null;
  const custom = CUSTOM_KEY.exec(key);
  if (custom === null)
    return `an API key of your own must be "<id>.<secret>": an id of 1-32 letters, digits, "_" or "-", a dot, then the secret`;
  if ((custom[2] as string).length < MIN_KEY_LENGTH)
    return `an API key's secret (after "${custom[1]}.") must have at least ${MIN_KEY_LENGTH} characters`;
  return null;
}

/** The salt a generated key carries (base64url), or null for a key of another form. */
export function saltOf(key: string): string | null {
  return GENERATED_KEY.exec(key)?.[1] ?? null;
}

/**
 * The id a presented key names its one candidate hash by (a generated key's salt, the id
 * of a key of another form), or null when the key is of no form an auth file can hold
 * (then it is refused without a KDF run). Cheap: two regular expressions, no KDF.
 */
export function keyIdOf(key: string): string | null {
  if (apiKeyProblem(key) !== null) return null;
  return saltOf(key) ?? (CUSTOM_KEY.exec(key)?.[1] as string);
}

/** Parses a stored hash; a string says what is wrong with it. */
export function parseKeyHash(text: string): KeyHash | string {
  const parts = text.split('$');
  if ((parts.length !== 6 && parts.length !== 7) || parts[0] !== 'scrypt')
    return 'must be "scrypt$N$r$p$salt$hash" or "scrypt$N$r$p$salt$hash$id" (the output of fencegate auth hash)';
  const [, nText, rText, pText, saltText = '', hashText = '', id] = parts;
  if (id !== undefined && !KEY_ID.test(id)) return 'the key id must be 1-32 letters, digits, "_" or "-"';
  const num = (t: string | undefined) => (t !== undefined && /^[1-9][0-9]{0,7}$/.test(t) ? Number(t) : NaN);
  const N = num(nText);
  const r = num(rText);
  const p = num(pText);
  if (!(N >= LIMITS.N[0] && N <= LIMITS.N[1] && (N & (N - 1)) === 0))
    return `N must be a power of 2 from ${LIMITS.N[0]} to ${LIMITS.N[1]}`;
  if (!(r >= LIMITS.r[0] && r <= LIMITS.r[1])) return `r must be from ${LIMITS.r[0]} to ${LIMITS.r[1]}`;
  if (!(p >= LIMITS.p[0] && p <= LIMITS.p[1])) return `p must be from ${LIMITS.p[0]} to ${LIMITS.p[1]}`;
  const salt = base64url(saltText);
  const hash = base64url(hashText);
  if (salt === null || salt.length < 8) return 'the salt must be at least 8 bytes of base64url';
  if (hash === null || hash.length < 16 || hash.length > 64)
    return 'the hash must be 16 to 64 bytes of base64url';
  return { N, r, p, salt, hash, saltText, keyId: id ?? saltText };
}

function base64url(text: string): Buffer | null {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return null;
  const b = Buffer.from(text, 'base64url');
  return b.toString('base64url') === text ? b : null;
}

/**
 * Whether `key` is the key of `stored`: the KDF over the presented key, then a
 * constant-time comparison of the whole derived hash (timingSafeEqual), so how long
 * the answer takes says nothing about how much of the hash matched.
 */
export async function verifyApiKey(key: string, stored: KeyHash): Promise<boolean> {
  const derived = await derive(key, stored.salt, stored.hash.length, stored);
  return timingSafeEqual(derived, stored.hash);
}

function derive(
  key: string,
  salt: Buffer,
  length: number,
  { N, r, p }: { N: number; r: number; p: number },
): Promise<Buffer> {
  // scrypt needs 128·N·r bytes; Node's default cap (32 MiB) would refuse N = 2^18 and up.
  const options: ScryptOptions = { N, r, p, maxmem: 256 * N * r + 1024 * 1024 };
  return new Promise((resolve, reject) =>
    scrypt(key, salt, length, options, (err, out) => (err ? reject(err) : resolve(out))),
  );
}
