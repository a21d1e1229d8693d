/**
 * The sequencer format: `base64url(payload) "." base64url(signature)`, where payload is
 * the UTF-8 JSON object `{"v":2,"kid","ns","lock","token","lease","epoch","exp"}` (ns the
 * store namespace, token a decimal string, exp the lease's expiry in ms on the store's
 * clock) and signature is Ed25519 over the payload bytes. Clients treat it as opaque;
 * only this module reads it. Version 1 (no `ns`) is no longer accepted.
 */
import { sign, verify, type KeyObject } from 'node:crypto';
import { checkLockKey } from '../lock-keys.js';
import { parseToken, type FencingToken } from '../tokens.js';

export interface SequencerClaims {
  /** Id of the key that signed it. */
  kid: string;
  /** The store namespace (Redis key prefix, Postgres or embedded schema) of the issuing deployment. */
  ns: string;
  lock: string;
  token: FencingToken;
  leaseId: string;
  /** The store's epoch id when it was issued (null before the store has one). */
  epoch: string | null;
  /** Store-clock ms at which the lease lapses (as the issuer knew it when signing). */
  expiresAt: number;
}

/** Longest sequencer accepted: a 256-byte key JSON-escaped, a lease id, an epoch id and a signature fit well within. */
export const MAX_SEQUENCER_LENGTH = 4096;

const B64URL = /^[A-Za-z0-9_-]+$/;

export function signSequencer(claims: SequencerClaims, key: KeyObject): string {
  const payload = Buffer.from(
    JSON.stringify({
      v: 2,
      kid: claims.kid,
      ns: claims.ns,
      lock: claims.lock,
      token: claims.token.toString(10),
      lease: claims.leaseId,
      epoch: claims.epoch,
      exp: claims.expiresAt,
    }),
    'utf8',
  );
  return `${payload.toString('base64url')}.${sign(null, payload, key).toString('base64url')}`;
}

export type DecodedSequencer =
  { ok: true; claims: SequencerClaims; payload: Buffer; signature: Buffer } | { ok: false; reason: string };

/** Splits and parses a sequencer without checking its signature (see verifySequencer). */
export function decodeSequencer(text: string): DecodedSequencer {
  const fail = (reason: string): DecodedSequencer => ({ ok: false, reason });
  if (text.length > MAX_SEQUENCER_LENGTH) return fail('the sequencer is too long');
  const dot = text.indexOf('.');
  if (dot < 0 || dot !== text.lastIndexOf('.'))
    return fail('a sequencer is two base64url parts joined by "."');
  const [p, s] = [text.slice(0, dot), text.slice(dot + 1)];
  if (!B64URL.test(p) || !B64URL.test(s)) return fail('a sequencer is two base64url parts joined by "."');
  const payload = Buffer.from(p, 'base64url');
  const signature = Buffer.from(s, 'base64url');
  // Only the canonical encoding is accepted: one sequencer, one string (the cache key).
  if (payload.toString('base64url') !== p || signature.toString('base64url') !== s)
    return fail('the sequencer is not canonical base64url');
  if (signature.length !== 64) return fail('the signature is not an Ed25519 signature');
  let data: unknown;
  try {
    data = JSON.parse(payload.toString('utf8'));
  } catch {
    return fail('the sequencer payload is not JSON');
  }
  const claims = claimsOf(data);
  return claims === null
    ? fail('the sequencer payload is not a fencegate sequencer')
    : { ok: true, claims, payload, signature };
}

function claimsOf(data: unknown): SequencerClaims | null {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) return null;
  const o = data as Record<string, unknown>;
  if (o.v !== 2 || Object.keys(o).length !== 8) return null;
  const { kid, ns, lock, token, lease, epoch, exp } = o;
  if (typeof kid !== 'string' || typeof ns !== 'string') return null;
  if (typeof lock !== 'string' || !checkLockKey(lock).ok) return null;
  const parsed = parseToken(token);
  if (!parsed.ok || typeof lease !== 'string' || lease.length === 0) return null;
  if (epoch !== null && typeof epoch !== 'string') return null;
  if (typeof exp !== 'number' || !Number.isSafeInteger(exp) || exp <= 0) return null;
  return { kid, ns, lock, token: parsed.token, leaseId: lease, epoch, expiresAt: exp };
}

export function verifySignature(decoded: { payload: Buffer; signature: Buffer }, key: KeyObject): boolean {
  return verify(null, decoded.payload, key, decoded.signature);
}
