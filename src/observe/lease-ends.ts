/**
 * When leases ended, as the issuer of this process saw them: released (at the release),
 * lapsed (at their expiry), or replaced by a new grant of their key (at the earlier of
 * the two). The event log reads it to say how long ago a refused token's lease ended
 * (docs/events.md, `leaseEndedAt`). In memory, bounded, and only what this process's
 * issuer granted and saw end: a lease granted by another replica, or before a restart,
 * is not known (null).
 */

/** Ended leases remembered per lock key, newest first. */
const PER_KEY = 16;
/** Keys remembered at most (least recently ended dropped first). */
const KEYS = 10_000;

export class LeaseEnds {
  /** key → [token, ms since the epoch when its lease ended, the same as ISO text], newest first. */
  private readonly ends = new Map<string, [string, number, string][]>();
  /** Live grants to ask about a lease not yet seen ending: its expiry once past, else null. */
  private live: ((key: string, token: string) => number | null) | null = null;

  constructor(
    private readonly perKey = PER_KEY,
    private readonly keys = KEYS,
  ) {}

  /** The issuer's tracked grants: a lease past its expiry that no sweep has ended yet. */
  watchLive(read: (key: string, token: string) => number | null): void {
    this.live = read;
  }

  /** The lease of `token` (decimal) on `key` ended at `at` (ms since the epoch). */
  note(key: string, token: string, at: number): void {
    const list = this.ends.get(key) ?? [];
    this.ends.delete(key);
    const kept = list.filter(([t]) => t !== token);
    kept.unshift([token, at, new Date(at).toISOString()]);
    if (kept.length > this.perKey) kept.length = this.perKey;
    this.ends.set(key, kept);
    if (this.ends.size > this.keys) {
      const oldest = this.ends.keys().next();
      if (oldest.done !== true) this.ends.delete(oldest.value);
    }
  }

  /** When the lease of `token` on `key` ended (ms since the epoch), or null when not known to have ended. */
  endedAt(key: string, token: string): number | null {
    const found = this.ends.get(key)?.find(([t]) => t === token);
    if (found !== undefined) return found[1];
    return this.live?.(key, token) ?? null;
  }

  /**
   * endedAt as ISO text, for an event: the text made once when the end was noted, so a
   * flood of refusals of one token allocates nothing here (and shares its event body).
   */
  endedIso(key: string, token: string): string | null {
    const found = this.ends.get(key)?.find(([t]) => t === token);
    if (found !== undefined) return found[2];
    const live = this.live?.(key, token) ?? null;
    return live === null ? null : new Date(live).toISOString();
  }
}
