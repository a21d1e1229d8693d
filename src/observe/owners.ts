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
