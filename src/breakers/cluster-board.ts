/**
 * The primary's breaker board (GET /v1/status): each worker has its own circuit
 * breakers, the store's and one per upstream; the board shows for each the worst state
 * over the workers (open, then half_open, then closed), asked from them on refresh().
 */
import type { Worker } from 'node:cluster';
import { BreakerBoard, type BreakerSnapshot, type BreakerState } from './board.js';
import { mergeSummaries, type UpstreamSummary } from './upstream-stats.js';

const RANK: Record<BreakerState, number> = { closed: 0, half_open: 1, open: 2 };

function worse(a: BreakerState | null | undefined, b: BreakerState | null | undefined): BreakerState | null {
  if (a == null) return b ?? null;
  if (b == null) return a;
  return RANK[b] > RANK[a] ? b : a;
}

/** The worst state of each breaker over `snapshots`. */
export function worstBreakers(snapshots: readonly BreakerSnapshot[]): BreakerSnapshot {
  let store: BreakerState | null = null;
  const upstreams: Record<string, BreakerState> = {};
  for (const s of snapshots) {
    store = worse(store, s.store);
    for (const [name, state] of Object.entries(s.upstreams)) {
      upstreams[name] = worse(upstreams[name], state) ?? state;
    }
  }
  return { store, upstreams, stats: mergeSummaries(snapshots.map((s) => s.stats ?? {})) };
}

export class ClusterBreakers extends BreakerBoard {
  private current: BreakerSnapshot = { store: null, upstreams: {} };

  constructor(
    private readonly workers: () => Worker[],
    private readonly ask: (worker: Worker) => Promise<unknown>,
  ) {
    super();
  }

  override store(): BreakerState | null {
    return this.current.store;
  }

  override upstream(name: string): BreakerState | null {
    return this.current.upstreams[name] ?? null;
  }

  override snapshot(): BreakerSnapshot {
    return this.current;
  }

  override upstreamStats(): Record<string, UpstreamSummary> {
    return this.current.stats ?? {};
  }

  override async refresh(): Promise<void> {
    const answers = await Promise.all(this.workers().map((w) => this.ask(w)));
    this.current = worstBreakers(answers.filter((a): a is BreakerSnapshot => isSnapshot(a)));
  }
}

function isSnapshot(a: unknown): a is BreakerSnapshot {
  return typeof a === 'object' && a !== null && 'upstreams' in a;
}
