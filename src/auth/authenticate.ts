/**
 * Who sent a request: the principal of its API key (`Authorization: Bearer <key>`) or
 * of its verified client certificate, from the auth file in force.
 *
 * The KDF (scrypt, tens of ms) runs once per distinct key: a verified key is cached,
 * keyed by a SHA-256 of the presented key (so the cache holds no key), in a bounded
 * map; so is a refused one, in a map of its own, so a client retrying a wrong key does
 * not cost a KDF run each time and cannot push good keys out. At most KDF_PARALLEL
 * runs at once: a flood of wrong keys waits its turn instead of taking every
 * thread and 16 MiB each.
 */
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { peerCertificate } from '../http/tls.js';
import { saltOf, verifyApiKey, type KeyHash } from './keys.js';
import { principalForCertificate, type AuthConfig, type Principal } from './model.js';

/** Distinct keys remembered, verified and refused each. */
export const KEY_CACHE_SIZE = 1024;
const KDF_PARALLEL = 2;

export type Authentication =
  /** principal null: the request carried no credential. */
  | { ok: true; principal: Principal | null }
  /** A credential that is not valid (unknown or wrong key, a second credential naming another principal). */
  | { ok: false };

interface Entry {
  principal: Principal;
  hash: KeyHash;
}

export class Authenticator {
  private current!: AuthConfig;
  private bySalt = new Map<string, Entry>();
  private entries: Entry[] = [];
  private readonly verified = new Map<string, string>();
  private readonly refused = new Set<string>();
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(config: AuthConfig) {
    this.replace(config);
  }

  get config(): AuthConfig {
    return this.current;
  }

  /** Puts another auth file in force (a reload): cached verdicts are dropped. */
  replace(config: AuthConfig): void {
    this.current = config;
    this.entries = config.principals.flatMap((principal) =>
      principal.keys.map((hash) => ({ principal, hash })),
    );
    this.bySalt = new Map(this.entries.map((e) => [e.hash.saltText, e]));
    this.verified.clear();
    this.refused.clear();
  }

  /** The principal whose key this is, or null. Never says more than that. */
  async principalForKey(key: string): Promise<Principal | null> {
    const config = this.current;
    const digest = createHash('sha256').update(key).digest('base64url');
    const name = this.verified.get(digest);
    if (name !== undefined) {
      this.verified.delete(digest); // to the back: least recently used leaves first
      this.verified.set(digest, name);
      return config.principals.find((p) => p.name === name) ?? null;
    }
    if (this.refused.has(digest)) return null;
    const salt = saltOf(key);
    // A generated key names its one candidate hash by its salt; another key is tried on all.
    const candidates = salt !== null ? [this.bySalt.get(salt)].filter((e) => e !== undefined) : this.entries;
    let found: Principal | null = null;
    for (const e of candidates) {
      if (await this.limited(() => verifyApiKey(key, e.hash))) {
        found = e.principal;
        break;
      }
    }
    // Another file was put in force meanwhile: judge the key again by that one.
    if (this.current !== config) return this.principalForKey(key);
    if (found !== null) remember(this.verified, digest, found.name);
    else {
      this.refused.add(digest);
      if (this.refused.size > KEY_CACHE_SIZE) this.refused.delete(this.refused.values().next().value!);
    }
    return found;
  }

  /**
   * The request's principal. A bearer key that does not verify is refused outright; so is
   * a request whose key and certificate name different principals.
   */
  async authenticate(authorization: string | undefined, socket: Socket): Promise<Authentication> {
    const byCert = principalForCertificate(peerCertificate(socket), this.current.principals);
    if (authorization === undefined) return { ok: true, principal: byCert };
    const m = /^Bearer +([\x21-\x7e]+) *$/i.exec(authorization);
    if (m === null) return { ok: false };
    const byKey = await this.principalForKey(m[1] as string);
    if (byKey === null || (byCert !== null && byCert.name !== byKey.name)) return { ok: false };
    return { ok: true, principal: byKey };
  }

  private async limited<T>(run: () => Promise<T>): Promise<T> {
    while (this.running >= KDF_PARALLEL) await new Promise<void>((r) => this.waiting.push(r));
    this.running += 1;
    try {
      return await run();
    } finally {
      this.running -= 1;
      this.waiting.shift()?.();
    }
  }
}

function remember(map: Map<string, string>, digest: string, name: string): void {
  map.set(digest, name);
  if (map.size > KEY_CACHE_SIZE) map.delete(map.keys().next().value!);
}
