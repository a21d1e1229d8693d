/**
 * Who sent a request: the principal of its API key (`Authorization: Bearer <key>`) or
 * of its verified client certificate, from the auth file in force.
 *
 * The KDF (scrypt, tens of ms and 16 MiB a run) is what a flood of bad keys would spend,
 * so every step before it is there to refuse such keys cheaply and to keep them from
 * delaying good ones (docs/security.md, "API keys"):
 *
 * - a key of no form the file can hold (too short, no id) is refused without a KDF run,
 *   and so is one whose id (a generated key's salt, or `<id>.` of another) names no
 *   hash: a presented key is tried against at most one hash;
 * - a verified key is cached, keyed by a SHA-256 of the presented key (so the cache holds
 *   no key), in a bounded map; so is a refused one, in a map of its own; concurrent
 *   requests with the same key share one run;
 * - a client (by address) whose keys failed a KDF run too often lately is answered 429
 *   `auth-throttled` before its key is looked at (refusals that cost no run are not
 *   counted: they cost nothing and can guess nothing), and may have at most
 *   CLIENT_PENDING runs waiting or running at once;
 * - at most KDF_PARALLEL runs go at once and at most MAX_WAITING wait: past that, 429
 *   `auth-busy` at once, with Retry-After, rather than a queue whose wait has no bound;
 * - a reload keeps the verified keys whose principal still holds the same hash.
 */
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { ProblemError } from '../errors.js';
import { peerCertificate } from '../http/tls.js';
import { keyIdOf, verifyApiKey, type KeyHash } from './keys.js';
import { principalForCertificate, type AuthConfig, type Principal } from './model.js';

/** Distinct keys remembered, verified and refused each. */
export const KEY_CACHE_SIZE = 1024;
/** KDF runs at once. */
export const KDF_PARALLEL = 2;
/** KDF runs waiting for one of the KDF_PARALLEL places at most; more are answered 429 auth-busy. */
export const MAX_WAITING = 16;
/** KDF runs one client may have waiting or running at once; more are answered 429. */
export const CLIENT_PENDING = 2;
/** Keys refused after a KDF run a client may have in a burst, and how many it regains a second. */
export const FAILURE_BURST = 10;
export const FAILURE_REFILL_PER_S = 1;
/** Clients whose failures are remembered at most (least recently failed out first). */
const CLIENTS_TRACKED = 4096;

export type Authentication =
  /** principal null: the request carried no credential. */
  | { ok: true; principal: Principal | null }
  /** A credential that is not valid (unknown or wrong key, a second credential naming another principal). */
  | { ok: false };

interface Entry {
  principal: Principal;
  hash: KeyHash;
}

interface Verified {
  name: string;
  hash: KeyHash;
}

/** A client's failure budget: a token bucket of FAILURE_BURST, refilled FAILURE_REFILL_PER_S a second. */
interface Budget {
  tokens: number;
  at: number;
}

export class Authenticator {
  private current!: AuthConfig;
  private byId = new Map<string, Entry>();
  private readonly verified = new Map<string, Verified>();
  private readonly refused = new Set<string>();
  /** Runs under way, by key digest: the same key presented again waits for the same run. */
  private readonly pending = new Map<string, Promise<Principal | null>>();
  private readonly pendingByClient = new Map<string, number>();
  private readonly budgets = new Map<string, Budget>();
  private running = 0;
  private readonly waiting: (() => void)[] = [];
  /** KDF runs started, for tests and the flood benchmark. */
  kdfRuns = 0;

  constructor(
    config: AuthConfig,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.replace(config);
  }

  get config(): AuthConfig {
    return this.current;
  }

  /**
   * Puts another auth file in force (a reload). A verified key stays verified if a
   * principal of the same name still holds the very hash it verified against; other
   * verdicts are dropped (a refused key may have been added).
   */
  replace(config: AuthConfig): void {
    this.current = config;
    const entries = config.principals.flatMap((principal) =>
      principal.keys.map((hash) => ({ principal, hash })),
    );
    this.byId = new Map(entries.map((e) => [e.hash.keyId, e]));
    for (const [digest, v] of [...this.verified]) {
      const e = this.byId.get(v.hash.keyId);
      if (e === undefined || e.principal.name !== v.name || !sameHash(e.hash, v.hash))
        this.verified.delete(digest);
    }
    this.refused.clear();
  }

  /** The principal whose key this is, or null. Never says more than that. `client` names who asks, for its limits. */
  async principalForKey(key: string, client = ''): Promise<Principal | null> {
    const config = this.current;
    const digest = createHash('sha256').update(key).digest('base64url');
    const known = this.verified.get(digest);
    if (known !== undefined) {
      this.verified.delete(digest); // to the back: least recently used leaves first
      this.verified.set(digest, known);
      return config.principals.find((p) => p.name === known.name) ?? null;
    }
    if (this.refused.has(digest)) return null;
    const id = keyIdOf(key);
    const entry = id === null ? undefined : this.byId.get(id);
    if (entry === undefined) return null; // no form, or no hash of that id: no KDF run
    let run = this.pending.get(digest);
    if (run === undefined) {
      if ((this.pendingByClient.get(client) ?? 0) >= CLIENT_PENDING)
        throw throttled('this client has too many keys being verified at once', 1);
      if (this.running >= KDF_PARALLEL && this.waiting.length >= MAX_WAITING) throw busy();
      run = this.verifyOnce(key, digest, entry, client);
      this.pending.set(digest, run);
      void run.finally(() => this.pending.delete(digest)).catch(() => undefined);
    }
    const found = await run;
    // Another file was put in force meanwhile: judge the key again by that one.
    if (this.current !== config) return this.principalForKey(key, client);
    return found;
  }

  /**
   * The request's principal. A bearer key that does not verify is refused outright; so is
   * a request whose key and certificate name different principals. Throws a ProblemError
   * (429 auth-throttled or auth-busy) when the key is not looked at.
   */
  async authenticate(authorization: string | undefined, socket: Socket): Promise<Authentication> {
    const byCert = principalForCertificate(peerCertificate(socket), this.current.principals);
    if (authorization === undefined) return { ok: true, principal: byCert };
    const client = socket.remoteAddress ?? '';
    const m = /^Bearer +([\x21-\x7e]+) *$/i.exec(authorization);
    const key = m?.[1];
    if (key !== undefined && this.isVerified(key)) {
      const byKey = await this.principalForKey(key, client);
      if (byKey !== null && (byCert === null || byCert.name === byKey.name))
        return { ok: true, principal: byKey };
    }
    this.checkBudget(client);
    const byKey = key === undefined ? null : await this.principalForKey(key, client);
    if (byKey === null || (byCert !== null && byCert.name !== byKey.name)) return { ok: false };
    return { ok: true, principal: byKey };
  }

  private isVerified(key: string): boolean {
    return this.verified.has(createHash('sha256').update(key).digest('base64url'));
  }

  private async verifyOnce(key: string, digest: string, e: Entry, client: string): Promise<Principal | null> {
    this.pendingByClient.set(client, (this.pendingByClient.get(client) ?? 0) + 1);
    try {
      const ok = await this.limited(() => verifyApiKey(key, e.hash));
      if (ok) remember(this.verified, digest, { name: e.principal.name, hash: e.hash });
      else {
        this.spend(client); // a guess that cost a KDF run: what the budget bounds
        this.refused.add(digest);
        if (this.refused.size > KEY_CACHE_SIZE) this.refused.delete(this.refused.values().next().value!);
      }
      return ok ? e.principal : null;
    } finally {
      const left = (this.pendingByClient.get(client) ?? 1) - 1;
      if (left === 0) this.pendingByClient.delete(client);
      else this.pendingByClient.set(client, left);
    }
  }

  /** Throws 429 when `client` has no failures left to spend. */
  private checkBudget(client: string): void {
    const b = this.budget(client);
    if (b !== undefined && b.tokens < 1)
      throw throttled(
        'too many failed authentications from this client',
        Math.ceil((1 - b.tokens) / FAILURE_REFILL_PER_S),
      );
  }

  private spend(client: string): void {
    const b = this.budget(client) ?? { tokens: FAILURE_BURST, at: this.now() };
    b.tokens -= 1;
    this.budgets.delete(client); // to the back: the least recently failing leaves first
    this.budgets.set(client, b);
    if (this.budgets.size > CLIENTS_TRACKED) this.budgets.delete(this.budgets.keys().next().value!);
  }

  /** The client's budget refilled to now; undefined when it has not failed lately. */
  private budget(client: string): Budget | undefined {
    const b = this.budgets.get(client);
    if (b === undefined) return undefined;
    const t = this.now();
    b.tokens = Math.min(FAILURE_BURST, b.tokens + ((t - b.at) / 1000) * FAILURE_REFILL_PER_S);
    b.at = t;
    if (b.tokens >= FAILURE_BURST) {
      this.budgets.delete(client);
      return undefined;
    }
    return b;
  }

  private async limited<T>(run: () => Promise<T>): Promise<T> {
    while (this.running >= KDF_PARALLEL) await new Promise<void>((r) => this.waiting.push(r));
    this.running += 1;
    this.kdfRuns += 1;
    try {
      return await run();
    } finally {
      this.running -= 1;
      this.waiting.shift()?.();
    }
  }
}

function throttled(detail: string, retryAfterS: number): ProblemError {
  return new ProblemError(
    'auth-throttled',
    detail,
    {},
    { headers: { 'retry-after': String(Math.max(1, retryAfterS)) } },
  );
}

function busy(): ProblemError {
  return new ProblemError(
    'auth-busy',
    'too many credentials are waiting to be verified; retry shortly',
    {},
    { headers: { 'retry-after': '1' } },
  );
}

function sameHash(a: KeyHash, b: KeyHash): boolean {
  return a.N === b.N && a.r === b.r && a.p === b.p && a.salt.equals(b.salt) && a.hash.equals(b.hash);
}

function remember(map: Map<string, Verified>, digest: string, v: Verified): void {
  map.set(digest, v);
  if (map.size > KEY_CACHE_SIZE) map.delete(map.keys().next().value!);
}
