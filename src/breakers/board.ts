/**
 * The circuit breakers in force (the store's, on the gateway's request path, and one per
 * upstream that has been used), for GET /v1/status and the dashboard. The gateway
 * registers its breakers as it makes them; readers only see their current state.
 * With --workers each worker has its own breakers, and the primary's board shows the
 * worst state over the workers (src/breakers/cluster-board.ts).
 */
import type { BreakerState } from './circuit.js';
import { UpstreamStats, type UpstreamSummary } from './upstream-stats.js';

export type { BreakerState } from './circuit.js';

/** Every breaker's state at one moment (what a worker reports to its primary). */
export interface BreakerSnapshot {
  store: BreakerState | null;
  upstreams: Record<string, BreakerState>;
  /** What each upstream answered lately (./upstream-stats.ts); absent from an older worker. */
  stats?: Record<string, UpstreamSummary>;
}

type Read = () => BreakerState;

export class BreakerBoard {
  private storeRead: Read | null = null;
  private readonly upstreams = new Map<string, Read>();
  /** What the upstreams answered lately: the gateway's upstream pool records into it. */
  readonly stats = new UpstreamStats();

  setStore(read: Read): void {
    this.storeRead = read;
  }

  /** Registers (or replaces) an upstream's breaker; returns a function that removes it. */
  setUpstream(name: string, read: Read): () => void {
    this.upstreams.set(name, read);
    return () => {
      if (this.upstreams.get(name) === read) this.upstreams.delete(name);
    };
  }

  /** The store breaker's state, or null when no gateway runs in this process. */
  store(): BreakerState | null {
    return this.storeRead?.() ?? null;
  }

  /** An upstream breaker's state, or null when it has no breaker (yet: made on first use). */
  upstream(name: string): BreakerState | null {
    return this.upstreams.get(name)?.() ?? null;
  }

  /** Every breaker's state now, and the upstreams' summaries: what a worker reports to its primary (src/workers/). */
  snapshot(): BreakerSnapshot {
    const upstreams: Record<string, BreakerState> = {};
    for (const [name, read] of this.upstreams) upstreams[name] = read();
    return { store: this.store(), upstreams, stats: this.stats.summaries() };
  }

  /** Each upstream's summary of its recent answers (GET /v1/upstreams); read after refresh(). */
  upstreamStats(): Record<string, UpstreamSummary> {
    return this.stats.summaries();
  }

  /**
   * Brings the states up to date before a reader looks (GET /v1/status awaits it). Here
   * they are read live; with --workers the primary's board asks the workers.
   */
  async refresh(): Promise<void> {}
}
