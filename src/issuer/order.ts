/**
 * The canonical lock order, and what each owner holds through this issuer, to see an
 * ordering violation: an owner that holds a lock and takes another one that sorts
 * before it (docs/issuer.md, "Several locks at once").
 *
 * The canonical order is the byte order of the UTF-8 encoding of the key, as the client
 * names it (the issuer's key, before any store prefix): `Buffer.compare`. It is also the
 * order of `GET /v1/locks`. Every caller that takes locks in this one order can never be
 * part of a wait cycle, so acquires that wait cannot deadlock.
 */

/** Negative when `a` sorts before `b` in the canonical order, 0 when equal. */
export function compareKeys(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/** The keys in canonical order (a new array). */
export function canonicalOrder(keys: readonly string[]): string[] {
  return [...keys].sort(compareKeys);
}

/** What the issuer does with an ordering violation: count it (and record an event), or also refuse it. */
export type LockOrderMode = 'count' | 'refuse';

/** A lock an owner holds, as the issuer tracks it: key and local expiry (ms, Date.now()). */
export interface HeldLock {
  key: string;
  expiresAt: number;
}

/**
 * Owner → the grants it holds through this issuer (by grant id). Kept in step with the
 * issuer's bounded grant tracking: it holds no more than that does.
 */
export class OwnerHolds {
  private readonly byOwner = new Map<string, Map<string, HeldLock>>();

  add(owner: string, grantId: string, held: HeldLock): void {
    let m = this.byOwner.get(owner);
    if (m === undefined) this.byOwner.set(owner, (m = new Map()));
    m.set(grantId, held);
  }

  remove(owner: string, grantId: string): void {
    const m = this.byOwner.get(owner);
    if (m === undefined) return;
    m.delete(grantId);
    if (m.size === 0) this.byOwner.delete(owner);
  }

  /**
   * The highest key (canonical order) `owner` holds live now that sorts after `first`,
   * the lowest key it asks for: an acquire of `first` is then out of order. null when
   * there is none, and when the owner holds `first` itself (a retry, not a new lock).
   */
  violatedBy(owner: string, first: string, now: number): string | null {
    const m = this.byOwner.get(owner);
    if (m === undefined) return null;
    let above: string | null = null;
    for (const h of m.values()) {
      if (h.expiresAt <= now) continue;
      const c = compareKeys(h.key, first);
      if (c === 0) return null;
      if (c > 0 && (above === null || compareKeys(h.key, above) > 0)) above = h.key;
    }
    return above;
  }

  get owners(): number {
    return this.byOwner.size;
  }
}
