/**
 * Redis key layout. Every key of one lock carries the same hash tag, so one script can
 * touch them all in Redis Cluster:
 *
 *   <prefix>:{<tag>}:ctr       hash    issued, floor, shadow   (token strings; shadow: the shadow record),
 *                                      owners: '<token> <owner>' lines of the last grants
 *   <prefix>:{<tag>}:lease     hash    leaseId, owner, token, expiresAt, ttlMs
 *   <prefix>:{<tag>}:fence     string  highest admitted token
 *   <prefix>:{<tag>}:inf       hash    requestId -> '<token> <gateway session> <bound ms>' (in flight)
 *   <prefix>:{<tag>}:waitq     zset    waiterId -> FIFO position
 *   <prefix>:{<tag>}:waitdl    hash    waiterId -> deadline ms
 *   <prefix>:{<tag>}:rq:<h>    string  idempotency record "<leaseId> <token>",
 *                                      h = first 128 bits of sha256(owner, requestId)
 *   <prefix>:{<tag>}:ch        pub/sub channel (not a key)
 *   <prefix>:epoch             hash    id, floor               (global, not tagged)
 *   <prefix>:idem:{<tag>}      hash    fp, at, r: a gateway Idempotency-Key record (tagged by
 *                                      its own key, not a lock's: a request may write several
 *                                      locks or none, and each script touches this one key)
 *   <prefix>:gateways          hash    sessionId -> '<beat> <ttlMs>' (global, not tagged)
 *   <prefix>:node:{n<i>}       string  Redis Cluster only: a primary's marker, in the lowest slot
 *                                      it serves (cluster-verify.ts); gone with its data
 *
 * The tag is the lock key with `%`, `{` and `}` percent-escaped: readable for operators
 * (`fg:{order:42}:lease`), reversible, and free of braces, so a key such as `a}b{c`
 * cannot end the tag early or move the key to another slot.
 */
import { createHash } from 'node:crypto';

export interface LockKeys {
  ctr: string;
  lease: string;
  fence: string;
  inf: string;
  waitq: string;
  waitdl: string;
  channel: string;
  /** Idempotency record for (owner, requestId). */
  req(owner: string, requestId: string): string;
}

const ESCAPES: Record<string, string> = { '%': '%25', '{': '%7B', '}': '%7D' };
const UNESCAPES: Record<string, string> = { '%25': '%', '%7B': '{', '%7D': '}' };

/** Encodes a lock key as a brace-free hash tag. */
export function encodeTag(key: string): string {
  return key.replace(/[%{}]/g, (c) => ESCAPES[c] ?? c);
}

/** Inverse of encodeTag. */
export function decodeTag(tag: string): string {
  return tag.replace(/%(25|7B|7D)/g, (m) => UNESCAPES[m] ?? m);
}

export function lockKeys(prefix: string, key: string): LockKeys {
  const base = `${prefix}:{${encodeTag(key)}}`;
  return {
    ctr: `${base}:ctr`,
    lease: `${base}:lease`,
    fence: `${base}:fence`,
    inf: `${base}:inf`,
    waitq: `${base}:waitq`,
    waitdl: `${base}:waitdl`,
    channel: `${base}:ch`,
    req(owner: string, requestId: string): string {
      // 128 bits are plenty against collisions and keep the record small (it lives 10 min
      // per grant). `rq`, not the `req` of the hash-shaped records before, so a left-over
      // record of the old shape is never read as a string.
      const h = createHash('sha256')
        .update(owner)
        .update('\0')
        .update(requestId)
        .digest()
        .subarray(0, 16)
        .toString('base64url');
      return `${base}:rq:${h}`;
    },
  };
}

const LINE_ESCAPES: Record<string, string> = { '%': '%25', '\n': '%0A' };

/** An owner as written in the `owners` field of ctr: one line, `%` and newline escaped. */
export function encodeOwnerLine(owner: string): string {
  return owner.replace(/[%\n]/g, (c) => LINE_ESCAPES[c] ?? c);
}

/** Inverse of encodeOwnerLine. */
export function decodeOwnerLine(line: string): string {
  return line.replace(/%(25|0A)/g, (m) => (m === '%25' ? '%' : '\n'));
}

/** The record of a gateway idempotency key (Store.beginIdempotent); its own hash tag. */
export function idempotencyKey(prefix: string, key: string): string {
  return `${prefix}:idem:{${encodeTag(key)}}`;
}

export function epochKey(prefix: string): string {
  return `${prefix}:epoch`;
}

/** The gateway sessions of this namespace (docs/adr/0005). */
export function sessionsKey(prefix: string): string {
  return `${prefix}:gateways`;
}

/** Escapes the glob characters of Redis MATCH patterns. */
function globEscape(text: string): string {
  return text.replace(/[\\*?[\]]/g, (c) => `\\${c}`);
}

/**
 * SCAN patterns for keys that may have a live lease or live waiters, for lock keys that
 * start with `keyPrefix` ('' = all).
 */
export function scanPatterns(prefix: string, keyPrefix = ''): string[] {
  const tag = globEscape(encodeTag(keyPrefix));
  return [`${prefix}:{${tag}*}:lease`, `${prefix}:{${tag}*}:waitq`];
}

/** SCAN pattern of every lock's in-flight hash (`<prefix>:{tag}:inf`). */
export function inflightPattern(prefix: string): string {
  return `${globEscape(prefix)}:{*}:inf`;
}

/** The pub/sub channel of the lock whose in-flight hash is `infKey` (`…:inf` → `…:ch`). */
export function channelOfInflight(infKey: string): string {
  return `${infKey.slice(0, -':inf'.length)}:ch`;
}

/** The lock key of a `<prefix>:{tag}:lease|waitq` key, or null for anything else. */
export function lockKeyOf(prefix: string, redisKey: string): string | null {
  const head = `${prefix}:{`;
  if (!redisKey.startsWith(head)) return null;
  const close = redisKey.indexOf('}', head.length);
  if (close < 0) return null;
  const rest = redisKey.slice(close + 1);
  if (rest !== ':lease' && rest !== ':waitq') return null;
  return decodeTag(redisKey.slice(head.length, close));
}
