/**
 * After this gateway finds that the fence store lost or replaced its state — its session
 * gone while it was valid (the store forgot it), another epoch than the one it knew, or
 * another store behind the connection (docs/adr/0019-store-identity.md) — the in-flight
 * entries of writes already at their upstreams may be gone with it, and with them the
 * drain barrier. So for the lock-delay of each route's bound (lock-delay.ts) from then
 * on, no fenced write of that route is admitted: writes delivered before the loss are
 * applied or dropped first. The floor the store raised refuses every older token anyway;
 * what waits here is the next owner's first writes.
 */
import type { Metrics } from '../observe/metrics.js';
import { lockDelayMs } from './lock-delay.js';

export interface ResetHoldLog {
  warn(obj: object, msg: string): void;
}

export class ResetHold {
  /** performance.now() when this process last found the store reset; null: never. */
  private since: number | null = null;

  constructor(
    private readonly metrics: Metrics,
    private readonly log: ResetHoldLog,
  ) {}

  /** The store's state was found lost or replaced (why, for the log). */
  reset(reason: string): void {
    this.since = performance.now();
    this.metrics.storeResets.inc();
    this.log.warn(
      { reason },
      'the fence store lost or replaced its state: fenced writes wait for their routes’ lock-delay ' +
        'so that writes already delivered are applied first',
    );
  }

  /** How long (ms) writes of a route with delivery bound `boundMs` still wait; 0 when they need not. */
  leftMs(boundMs: number): number {
    if (this.since === null) return 0;
    const left = this.since + lockDelayMs(boundMs) - performance.now();
    return left > 0 ? left : 0;
  }
}
