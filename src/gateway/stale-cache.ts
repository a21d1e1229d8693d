/**
 * The stale-write cache: what this gateway already knows is stale, per lock, so a flood
 * of stale writes is refused without a store round trip (docs/gateway.md, "Stale-write
 * cache"; docs/adr/0013-stale-write-cache.md).
 *
 * It holds only facts that stay true. The store refuses a token as stale when it is at
 * or below the epoch floor or below the highest admitted token; both only ever rise
 * (the fence is a max, and after a loss of store state the new epoch's floor is above
 * every token the old epoch issued, ADR 0002). So:
 *
 * - an admission the store *recorded* with highest H means every token below H is stale
 *   from then on;
 * - a refusal that reported highest H means the same;
 * - a stale refusal of token T means every token up to T is stale from then on (T was
 *   below the floor or below the highest, and neither goes down).
 *
 * The cache keeps the largest such bound per lock and refuses a token only below it: the
 * store, asked, would refuse that token as stale too (it never admits it; a token equal
 * to the highest admitted is admitted by the store, and never refused here). Anything
 * else goes to the store as before: admissions, forged tokens, lease checks.
 *
 * Bounded: at most `capacity` locks; the least recently raised lock is forgotten first,
 * which only sends its next write to the store.
 */
import type { FencingToken } from '../tokens.js';
import type { AdmitResult } from '../store/types.js';

/**
 * The default number of locks remembered: ~380 bytes each in the heap as measured (the
 * lock name, the bounds, the Map entry), so ~18 MiB full. 50,000, not the 100,000 it was:
 * the cache was most of what a gateway grew by with many distinct locks (issue 30), and a
 * lock forgotten only sends its next stale write to the store.
 */
export const STALE_CACHE_LOCKS = 50_000;

interface Known {
  /** Every token below this is stale. */
  below: FencingToken;
  /** The highest admitted token this gateway learned (a lower bound of the store's); null when only a floor is known. */
  highest: FencingToken | null;
}

export interface CachedRefusal {
  /** The highest admitted token known here, a lower bound of the store's (null: the token is below a floor). */
  highest: FencingToken | null;
}

export class StaleCache {
  private readonly known = new Map<string, Known>();

  constructor(readonly capacity: number = STALE_CACHE_LOCKS) {
    if (!Number.isInteger(capacity) || capacity < 0) throw new RangeError('capacity must be an integer ≥ 0');
  }

  get size(): number {
    return this.known.size;
  }

  /** A refusal when `token` is known stale for `lock`, else null (ask the store). */
  refuses(lock: string, token: FencingToken): Readonly<CachedRefusal> | null {
    const k = this.known.get(lock);
    // The record itself, read-only by type: a flood's refusals allocate nothing here.
    return k === undefined || token >= k.below ? null : k;
  }

  /**
   * Learns from the store's answer to an admission of `token` on `lock`. `recorded`:
   * the admission was recorded (enforced and gateway-fenced, or in shadow mode into the
   * shadow record, which has a cache of its own); a judge-only admission (a kind that
   * fences in the resource) reports a highest that was not stored, and teaches nothing.
   */
  learn(lock: string, token: FencingToken, recorded: boolean, result: AdmitResult): void {
    if (result.ok) {
      if (recorded) this.raise(lock, result.highest, result.highest);
      return;
    }
    const highest = result.highest;
    if (result.reason === 'stale') {
      const past = token + 1n;
      const below = highest !== null && highest > past ? highest : past;
      this.raise(lock, below, highest);
    } else if (highest !== null) {
      this.raise(lock, highest, highest);
    }
  }

  private raise(lock: string, below: FencingToken, highest: FencingToken | null): void {
    if (this.capacity === 0) return;
    const k = this.known.get(lock);
    if (k !== undefined) {
      const higherBound = below > k.below;
      const higherHighest = highest !== null && (k.highest === null || highest > k.highest);
      if (!higherBound && !higherHighest) return;
      if (higherBound) k.below = below;
      if (higherHighest) k.highest = highest;
      // Re-insert: the map's order is "least recently raised first", what eviction drops.
      this.known.delete(lock);
      this.known.set(lock, k);
      return;
    }
    if (this.known.size >= this.capacity) {
      const oldest = this.known.keys().next();
      if (oldest.done !== true) this.known.delete(oldest.value);
    }
    this.known.set(lock, { below, highest });
  }
}
