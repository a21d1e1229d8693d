/**
 * The circuit breakers in force (the store's, on the gateway's request path, and one per
 * upstream that has been used), for GET /v1/status and the dashboard. The gateway
 * registers its breakers as it makes them; readers only see their current state.
 * With --workers each worker has its own breakers, and the primary's board shows the
 * worst state over the workers (src/breakers/cluster-board.ts).
 */
import type { BreakerState } from './circuit.js';

export type { BreakerState } from './circuit.js';

/** Every breaker's state at one moment (what a worker reports to its primary). */
export interface BreakerSnapshot {
  store: BreakerState | null;
  upstreams: Record<string, BreakerState>;
}

type Read = () => BreakerState;

export class BreakerBoard {
  private storeRead: Read | null = null;
  private readonly upstreams = new Map<string, Read>();

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

  /** Every breaker's state now: what a worker reports to its primary (src/workers/). */
  snapshot(): BreakerSnapshot {
    const upstreams: Record<string, BreakerState> = {};
    for (const [name, read] of this.upstreams) upstreams[name] = read();
    return { store: this.store(), upstreams };
  }

  /**
   * Brings the states up to date before a reader looks (GET /v1/status awaits it). Here
   * they are read live; with --workers the primary's board asks the workers.
   */
  async refresh(): Promise<void> {}
}
