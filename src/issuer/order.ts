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

interface OwnerEntry {
  /** grant id → what it holds, and its key as UTF-8 (compared often). */
  grants: Map<string, { held: HeldLock; bytes: Buffer }>;
  /** key → how many of the grants hold it. */
  keys: Map<string, number>;
  /** The grant with the highest key, or null when it must be found again. */
  top: { held: HeldLock; bytes: Buffer } | null;
}

/**
 * Owner → the grants it holds through this issuer (by grant id). Kept in step with the
 * issuer's bounded grant tracking: it holds no more than that does. The check of an
 * acquire is O(1) (the owner's highest key is kept), except after the highest grant ended
 * or lapsed unswept: then one pass over that owner's grants finds the next.
 */
export class OwnerHolds {
  private readonly byOwner = new Map<string, OwnerEntry>();

  add(owner: string, grantId: string, held: HeldLock): void {
    let e = this.byOwner.get(owner);
    if (e === undefined) this.byOwner.set(owner, (e = { grants: new Map(), keys: new Map(), top: null }));
    const g = { held, bytes: Buffer.from(held.key, 'utf8') };
    e.grants.set(grantId, g);
    e.keys.set(held.key, (e.keys.get(held.key) ?? 0) + 1);
    if (e.grants.size === 1 || (e.top !== null && Buffer.compare(g.bytes, e.top.bytes) > 0)) e.top = g;
  }

  remove(owner: string, grantId: string): void {
    const e = this.byOwner.get(owner);
    const g = e?.grants.get(grantId);
    if (e === undefined || g === undefined) return;
    e.grants.delete(grantId);
    const n = (e.keys.get(g.held.key) ?? 1) - 1;
    if (n > 0) e.keys.set(g.held.key, n);
    else e.keys.delete(g.held.key);
    if (e.grants.size === 0) this.byOwner.delete(owner);
    else if (e.top === g) e.top = null;
  }

  /**
   * The highest key (canonical order) `owner` holds live now when it sorts after `first`,
   * the lowest key it asks for: an acquire of `first` is then out of order. null when
   * there is none, and when the owner holds `first` itself (a retry, not a new lock).
   */
  violatedBy(owner: string, first: string, now: number): string | null {
    const e = this.byOwner.get(owner);
    if (e === undefined || e.keys.has(first)) return null;
    if (e.top === null || e.top.held.expiresAt <= now) e.top = topLive(e, now);
    if (e.top === null) return null;
    return Buffer.compare(e.top.bytes, Buffer.from(first, 'utf8')) > 0 ? e.top.held.key : null;
  }

  get owners(): number {
    return this.byOwner.size;
  }
}

function topLive(e: OwnerEntry, now: number): OwnerEntry['top'] {
  let top: OwnerEntry['top'] = null;
  for (const g of e.grants.values()) {
    if (g.held.expiresAt <= now) continue;
    if (top === null || Buffer.compare(g.bytes, top.bytes) > 0) top = g;
  }
  return top;
}
