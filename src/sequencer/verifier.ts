/**
 * Offline verification of sequencers on the gateway's hot path. A sequencer whose
 * signature verified is cached (bounded LRU keyed by the exact string), so a holder's
 * repeated writes cost one Ed25519 verification per sequencer, not per write. A cache hit
 * still checks, every time, that the key is still accepted, that the sequencer is for
 * this lock and that its lease has not expired.
 *
 * Expiry is judged on the store's clock as this process estimates it (`clock`), since
 * the sequencer carries the lease's expiry in that clock: see docs/security.md. Its
 * namespace and epoch must be this gateway's store's (`audience`): a sequencer issued
 * for another deployment that shares the key file, or before the store's epoch changed,
 * is refused (on cache hits too).
 */
import { decodeSequencer, verifySignature, type SequencerClaims } from './format.js';
import type { KeyRing } from './keyring.js';
import { defaultNamespace } from '../store/namespace.js';
import type { Store } from '../store/types.js';

export type SequencerVerdict = { ok: true; claims: SequencerClaims } | { ok: false; reason: string };

export const DEFAULT_CACHE_ENTRIES = 10_000;

/** Whom a sequencer must be for: this gateway's store namespace and its current epoch id (null: none yet). */
export interface SequencerAudience {
  ns: string;
  epoch(): string | null;
}

/**
 * The audience of a gateway on `store`: its namespace (default: the store's default one)
 * and its epoch id, read now and again whenever the store reports a reset.
 */
export async function storeAudience(
  store: Store,
  namespace?: string | null,
): Promise<SequencerAudience & { close(): void }> {
  let epoch: string | null = null;
  const read = () =>
    store
      .health()
      .then((h) => {
        epoch = h.epoch?.id ?? epoch;
      })
      .catch(() => undefined);
  await read();
  const unwatch = store.onReset(() => void read());
  return { ns: namespace ?? defaultNamespace(store.kind), epoch: () => epoch, close: unwatch };
}

export class SequencerVerifier {
  private readonly cache = new Map<string, SequencerClaims>();

  constructor(
    private readonly keys: KeyRing,
    /** Store-clock ms now (an estimate that errs late, so expiry is judged early). */
    private readonly clock: () => number,
    private readonly audience: SequencerAudience,
    private readonly maxEntries = DEFAULT_CACHE_ENTRIES,
  ) {}

  /** Entries in the cache (for tests and metrics). */
  get cached(): number {
    return this.cache.size;
  }

  async verify(text: string, lock: string): Promise<SequencerVerdict> {
    let claims = this.cache.get(text);
    if (claims !== undefined) {
      this.cache.delete(text);
      // A key removed from the file (pruned, or withdrawn after a compromise) stops counting at once.
      if (this.keys.publicKey(claims.kid) === undefined) claims = undefined;
      else this.cache.set(text, claims); // most recently used last
    }
    if (claims === undefined) {
      const decoded = decodeSequencer(text);
      if (!decoded.ok) return { ok: false, reason: decoded.reason };
      const { kid } = decoded.claims;
      const key =
        this.keys.publicKey(kid) ??
        ((await this.keys.refreshFor(kid)) ? this.keys.publicKey(kid) : undefined);
      if (key === undefined) {
        // The kid is the sender's text: echoed only when it looks like a key id.
        const named = /^[A-Za-z0-9._-]{1,64}$/.test(kid) ? ` "${kid}"` : '';
        return { ok: false, reason: `the sequencer was signed with an unknown key${named}` };
      }
      if (!verifySignature(decoded, key))
        return { ok: false, reason: 'the sequencer signature does not verify' };
      claims = decoded.claims;
      if (claims.expiresAt > this.clock()) this.remember(text, claims);
    }
    if (claims.ns !== this.audience.ns)
      return {
        ok: false,
        reason: `the sequencer was issued for another store namespace, not "${this.audience.ns}"`,
      };
    const epoch = this.audience.epoch();
    if (claims.epoch !== epoch)
      return { ok: false, reason: "the sequencer was issued in another epoch than the store's current one" };
    if (claims.lock !== lock)
      return { ok: false, reason: `the sequencer is for lock "${claims.lock}", not "${lock}"` };
    if (claims.expiresAt <= this.clock())
      return {
        ok: false,
        reason: `the sequencer's lease expired at ${new Date(claims.expiresAt).toISOString()}`,
      };
    return { ok: true, claims };
  }

  private remember(text: string, claims: SequencerClaims): void {
    this.cache.set(text, claims);
    if (this.cache.size > this.maxEntries) {
      const oldest = this.cache.keys().next();
      if (oldest.done !== true) this.cache.delete(oldest.value);
    }
  }
}
