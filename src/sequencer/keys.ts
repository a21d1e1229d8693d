/**
 * Sequencer signing keys, kept in a key file (JSON, mode 0600) that every issuer and
 * gateway sharing a store reads. The file is the only place a private key lives: it
 * never goes to the store, the logs, an error message or the wire (GET /v1/keys
 * publishes public keys only). Why a file and not the store: docs/security.md.
 *
 * A key is in one of three states:
 * - `next`: published and accepted, not yet used to sign (step 1 of a rotation, so every
 *   process knows it before any sequencer signed with it exists);
 * - `current`: the one key that signs (exactly one);
 * - `retired`: public part only (the private part is dropped), still accepted until
 *   every sequencer it signed has expired, then pruned.
 */
import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  randomBytes,
  type KeyObject,
} from 'node:crypto';
import { link, readFile, rename, unlink, writeFile } from 'node:fs/promises';

export type KeyState = 'next' | 'current' | 'retired';

export interface KeyEntry {
  kid: string;
  state: KeyState;
  /** ISO-8601, when the key was made. */
  created: string;
  /** ISO-8601, when it stopped signing (retired keys only). */
  retiredAt?: string;
  /** Public key, base64url (the JWK `x`). */
  x: string;
  /** Private key, base64url (the JWK `d`); absent once retired. */
  d?: string;
}

export interface KeyFile {
  version: 1;
  keys: KeyEntry[];
}

export class SequencerKeyError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'SequencerKeyError';
  }
}

const KID = /^[A-Za-z0-9._-]{1,64}$/;
const B64URL_32 = /^[A-Za-z0-9_-]{43}$/;

/** Validates a parsed key file. Messages name the entry and field, never a key's bytes. */
export function parseKeyFile(data: unknown, where: string): KeyFile {
  const bad = (msg: string) => new SequencerKeyError(`${where}: ${msg}`);
  if (typeof data !== 'object' || data === null || Array.isArray(data)) throw bad('must be a JSON object');
  const { version, keys, ...rest } = data as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length > 0) throw bad(`unknown field "${unknown[0]}"`);
  if (version !== 1) throw bad('"version" must be 1');
  if (!Array.isArray(keys) || keys.length === 0) throw bad('"keys" must be a non-empty array');
  const seen = new Set<string>();
  const out: KeyEntry[] = keys.map((k: unknown, i) => {
    const at = `keys[${i}]`;
    if (typeof k !== 'object' || k === null || Array.isArray(k)) throw bad(`${at} must be an object`);
    const { kid, state, created, retiredAt, x, d, ...more } = k as Record<string, unknown>;
    const extra = Object.keys(more);
    if (extra.length > 0) throw bad(`${at}: unknown field "${extra[0]}"`);
    if (typeof kid !== 'string' || !KID.test(kid)) throw bad(`${at}.kid must be 1-64 of A-Z a-z 0-9 . _ -`);
    if (seen.has(kid)) throw bad(`${at}.kid "${kid}" appears twice`);
    seen.add(kid);
    if (state !== 'next' && state !== 'current' && state !== 'retired')
      throw bad(`${at}.state must be next, current or retired`);
    if (typeof created !== 'string' || Number.isNaN(Date.parse(created)))
      throw bad(`${at}.created must be an ISO-8601 time`);
    if (typeof x !== 'string' || !B64URL_32.test(x))
      throw bad(`${at}.x must be a base64url Ed25519 public key`);
    const entry: KeyEntry = { kid, state, created, x };
    if (state === 'retired') {
      if (d !== undefined) throw bad(`${at}: a retired key keeps no private key ("d")`);
      if (typeof retiredAt !== 'string' || Number.isNaN(Date.parse(retiredAt)))
        throw bad(`${at}.retiredAt must be an ISO-8601 time`);
      entry.retiredAt = retiredAt;
    } else {
      if (typeof d !== 'string' || !B64URL_32.test(d))
        throw bad(`${at}.d must be a base64url Ed25519 private key`);
      if (retiredAt !== undefined) throw bad(`${at}: only a retired key has "retiredAt"`);
      entry.d = d;
      // The private part must match the public part it is published under.
      const derived = createPublicKey(privateKeyOf(entry)).export({ format: 'jwk' }).x;
      if (derived !== x) throw bad(`${at}: "d" is not the private key of "x"`);
    }
    return entry;
  });
  const current = out.filter((k) => k.state === 'current').length;
  if (current !== 1) throw bad(`exactly one key must be "current" (found ${current})`);
  if (out.filter((k) => k.state === 'next').length > 1) throw bad('at most one key may be "next"');
  return { version: 1, keys: out };
}

export function privateKeyOf(entry: KeyEntry): KeyObject {
  if (entry.d === undefined) throw new SequencerKeyError(`key "${entry.kid}" has no private part`);
  return createPrivateKey({ key: { kty: 'OKP', crv: 'Ed25519', x: entry.x, d: entry.d }, format: 'jwk' });
}

export function publicKeyOf(entry: KeyEntry): KeyObject {
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: entry.x }, format: 'jwk' });
}

/** A fresh Ed25519 key with a random key id. */
export function newKeyEntry(state: 'next' | 'current', now = new Date()): KeyEntry {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = privateKey.export({ format: 'jwk' });
  if (jwk.x === undefined || jwk.d === undefined)
    throw new SequencerKeyError('node:crypto gave no Ed25519 JWK');
  const day = now.toISOString().slice(0, 10).replaceAll('-', '');
  return {
    kid: `${day}-${randomBytes(6).toString('base64url')}`,
    state,
    created: now.toISOString(),
    x: jwk.x,
    d: jwk.d,
  };
}

export function initKeyFile(now = new Date()): KeyFile {
  return { version: 1, keys: [newKeyEntry('current', now)] };
}

/** Rotation step 1: a new key, published and accepted, not yet signing. */
export function addNextKey(file: KeyFile, now = new Date()): { file: KeyFile; kid: string } {
  if (file.keys.some((k) => k.state === 'next'))
    throw new SequencerKeyError('a "next" key is already waiting to be promoted');
  const entry = newKeyEntry('next', now);
  return { file: { version: 1, keys: [...file.keys, entry] }, kid: entry.kid };
}

/** Rotation step 2: the next key signs from now on; the current one is retired (public part only). */
export function promoteNextKey(
  file: KeyFile,
  now = new Date(),
): { file: KeyFile; kid: string; retired: string } {
  const next = file.keys.find((k) => k.state === 'next');
  if (next === undefined)
    throw new SequencerKeyError('no "next" key to promote: add one first (fencegate keys add)');
  let retired = '';
  const keys = file.keys.map((k): KeyEntry => {
    if (k === next) return { ...k, state: 'current' };
    if (k.state !== 'current') return k;
    retired = k.kid;
    return { kid: k.kid, state: 'retired', created: k.created, retiredAt: now.toISOString(), x: k.x };
  });
  return { file: { version: 1, keys }, kid: next.kid, retired };
}

/** Rotation step 3: drops retired keys older than `olderThanMs` (every sequencer they signed has expired). */
export function pruneRetiredKeys(
  file: KeyFile,
  olderThanMs: number,
  now = new Date(),
): { file: KeyFile; removed: string[] } {
  const removed: string[] = [];
  const keys = file.keys.filter((k) => {
    const old = k.state === 'retired' && Date.parse(k.retiredAt ?? '') + olderThanMs <= now.getTime();
    if (old) removed.push(k.kid);
    return !old;
  });
  return { file: { version: 1, keys }, removed };
}

export async function readKeyFile(path: string): Promise<KeyFile> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    throw new SequencerKeyError(`${path}: cannot read the sequencer key file (${code})`, { cause: err });
  }
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch {
    // The parser's message may quote the file's text, private keys included: not repeated.
    throw new SequencerKeyError(`${path}: not valid JSON`);
  }
  return parseKeyFile(data, path);
}

/**
 * Writes the file atomically (a temp file renamed over it), readable by its owner only.
 * `exclusive`: fails with EEXIST when the file exists (several workers starting at once).
 */
export async function writeKeyFile(
  path: string,
  file: KeyFile,
  opts: { exclusive?: boolean } = {},
): Promise<void> {
  const text = `${JSON.stringify(file, null, 2)}\n`;
  const tmp = `${path}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, text, { mode: 0o600, flag: 'wx' });
  if (!opts.exclusive) {
    await rename(tmp, path);
    return;
  }
  // link() fails if the file exists, and a reader never sees it half written.
  try {
    await link(tmp, path);
  } finally {
    await unlink(tmp);
  }
}
