/**
 * Names the owner of a refused token for the event log, from the store's record of each
 * lock's recent grants (Store.recentGrants). Off the admission path and bounded, so a
 * flood of refusals cannot flood the store:
 * - one read per lock at a time: concurrent lookups for one lock share it;
 * - a lock's grants are cached (a token's owner never changes); a token the cache does
 *   not know is looked up again only after `refreshMs`;
 * - at most `maxConcurrent` reads in flight and `maxQueued` locks waiting for one; past
 *   that, and when a read fails or takes longer than `timeoutMs`, the answer is null;
 * - at most `maxLocks` locks cached (least recently used dropped first).
 */
import type { GrantRecord } from '../store/types.js';
import type { Attribution } from './event-types.js';

export interface GrantSource {
  recentGrants(key: string): Promise<GrantRecord[]>;
}

export interface OwnerLookupOptions {
  maxLocks?: number;
  refreshMs?: number;
  timeoutMs?: number;
  maxConcurrent?: number;
  maxQueued?: number;
}

interface Cached {
  /** performance.now() of the read. */
  at: number;
  owners: Map<string, string>;
  /** The record's grants, newest (highest token) first. */
  grants: { token: bigint; owner: string }[];
  /** Attributions made from this record, by token: one shared object per token. */
  attributions: Map<string, Attribution>;
  /** The last `highest` compared with the record's newest grant, and whether it was newer. */
  lastHighest: string | null;
  highestNewer: boolean;
}

export class OwnerLookup {
  private readonly cache = new Map<string, Cached>();
  private readonly reading = new Map<string, Promise<Cached | null>>();
  private readonly queue: (() => void)[] = [];
  private active = 0;
  private readonly maxLocks: number;
  private readonly refreshMs: number;
  private readonly timeoutMs: number;
  private readonly maxConcurrent: number;
  private readonly maxQueued: number;
  /** Locks whose grants are cached now (≤ maxLocks). */
  get size(): number {
    return this.cache.size;
  }

  /** Store reads started (for tests and the status page). */
  reads = 0;

  constructor(
    private readonly source: GrantSource,
    options: OwnerLookupOptions = {},
  ) {
    this.maxLocks = options.maxLocks ?? 1000;
    this.refreshMs = options.refreshMs ?? 1000;
    this.timeoutMs = options.timeoutMs ?? 1000;
    this.maxConcurrent = options.maxConcurrent ?? 4;
    this.maxQueued = options.maxQueued ?? 1000;
  }

  /**
   * The owner granted `token` (decimal string) of `lock`, or null when unknown: at once from
   * the cache, else a promise of it once read. Never rejects.
   */
  owner(lock: string, token: string): string | null | Promise<string | null> {
    const cached = this.cache.get(lock);
    const known = cached?.owners.get(token);
    if (known !== undefined) return known;
    if (cached !== undefined && performance.now() - cached.at < this.refreshMs) return null;
    return this.read(lock).then((fresh) => fresh?.owners.get(token) ?? null);
  }

  /**
   * What the record of `lock`'s recent grants says of `token`: its owner, how many grants
   * came after it, and the newest grant (docs/events.md). At once from the cache, else a
   * promise once read. A cached record older than `highest` (a grant since it was read) is
   * read again, at most once per `refreshMs`. Never rejects.
   */
  attribution(
    lock: string,
    token: string,
    highest: string | null,
  ): Attribution | null | Promise<Attribution | null> {
    const cached = this.cache.get(lock);
    if (cached !== undefined) {
      const fresh = performance.now() - cached.at < this.refreshMs;
      const behindHighest = highest !== null && newerThanRecord(cached, highest);
      if (fresh || (cached.owners.has(token) && !behindHighest)) return attributionOf(cached, token);
    }
    return this.read(lock).then((entry) => (entry === null ? null : attributionOf(entry, token)));
  }

  private read(lock: string): Promise<Cached | null> {
    const pending = this.reading.get(lock);
    if (pending !== undefined) return pending;
    if (this.active >= this.maxConcurrent && this.queue.length >= this.maxQueued) {
      return Promise.resolve(null);
    }
    const p = this.slot()
      .then(() => this.fetch(lock))
      .finally(() => {
        this.reading.delete(lock);
        this.release();
      });
    this.reading.set(lock, p);
    return p;
  }

  private async fetch(lock: string): Promise<Cached | null> {
    this.reads += 1;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), this.timeoutMs);
    });
    const grants = this.source.recentGrants(lock).catch(() => null);
    const result = await Promise.race([grants, timeout]);
    clearTimeout(timer);
    if (result === null) return null;
    const entry: Cached = {
      at: performance.now(),
      owners: new Map(result.map((g) => [g.token.toString(10), g.owner])),
      grants: result
        .map((g) => ({ token: g.token, owner: g.owner }))
        .sort((a, b) => (a.token < b.token ? 1 : -1)),
      attributions: new Map(),
      lastHighest: null,
      highestNewer: false,
    };
    this.cache.delete(lock);
    this.cache.set(lock, entry);
    if (this.cache.size > this.maxLocks) {
      const oldest = this.cache.keys().next();
      if (!oldest.done) this.cache.delete(oldest.value);
    }
    return entry;
  }

  private slot(): Promise<void> {
    if (this.active < this.maxConcurrent) {
      this.active += 1;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.queue.push(resolve));
  }

  private release(): void {
    const next = this.queue.shift();
    if (next !== undefined) next();
    else this.active -= 1;
  }
}

/** Whether `highest` (decimal) is above the record's newest grant (a grant the record does not hold yet). */
function newerThanRecord(entry: Cached, highest: string): boolean {
  if (entry.lastHighest !== highest) {
    let newer: boolean;
    try {
      newer = BigInt(highest) > (entry.grants[0]?.token ?? -1n);
    } catch {
      newer = false;
    }
    entry.lastHighest = highest;
    entry.highestNewer = newer;
  }
  return entry.highestNewer;
}

/** The attribution of `token` by one record (made once per token and record, then shared). */
function attributionOf(entry: Cached, token: string): Attribution {
  let made = entry.attributions.get(token);
  if (made !== undefined) return made;
  const owner = entry.owners.get(token) ?? null;
  const newest = entry.grants[0];
  let presented: bigint | null;
  try {
    presented = BigInt(token);
  } catch {
    presented = null;
  }
  const after = presented === null ? 0 : entry.grants.filter((g) => g.token > presented).length;
  // A token the record does not hold: older than all of it (at least that many grants
  // behind), or never issued (among or above the record: nothing to count).
  const older = owner === null && presented !== null && after === entry.grants.length && after > 0;
  made = {
    owner,
    behind: owner !== null ? { grants: after, exact: true } : older ? { grants: after, exact: false } : null,
    holder: newest === undefined ? null : { owner: newest.owner, token: newest.token.toString(10) },
  };
  if (entry.attributions.size < 64) entry.attributions.set(token, made);
  return made;
}
