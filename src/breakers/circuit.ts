/**
 * The request path's circuit breaker: opossum, configured for the request path and
 * wrapped so that one breaker guards many different calls.
 *
 * - Every call counts as a fire in a rolling window of `rollingWindowMs` (10 buckets).
 * - A failure (an error not excused by `ignore`, or a call slower than `timeoutMs`)
 *   opens the circuit once the window has at least `volumeThreshold` fires and more than
 *   `errorThresholdPercentage` % of them failed.
 * - While open, calls are refused at once with code `EOPENBREAKER`. After
 *   `resetTimeoutMs` one trial call is let through (half-open): success closes the
 *   circuit, failure opens it again; other calls during the trial are refused.
 * - Errors excused by `ignore` count as successes (opossum's errorFilter) and are still
 *   passed to the caller.
 *
 * Cost: opossum's rolling latency percentiles keep every call's latency and sort the
 * whole window on each snapshot; under load that was ~5 % of the gateway's CPU. Neither
 * percentiles nor snapshots are used here, so both are off; what remains is a handful of
 * event emissions per call.
 */
import CircuitBreaker from 'opossum';

/** A circuit's states (fencegate_breaker_state{state}, GET /v1/status). */
export const BREAKER_STATES = ['closed', 'half_open', 'open'] as const;
export type BreakerState = (typeof BREAKER_STATES)[number];

export interface BreakerOptions {
  /** A call slower than this fails with code ETIMEDOUT; false: no timeout. */
  timeoutMs: number | false;
  errorThresholdPercentage: number;
  volumeThreshold: number;
  resetTimeoutMs: number;
  rollingWindowMs: number;
  onOpen?: () => void;
  onClose?: () => void;
  /** Every state change (for fencegate_breaker_state); the circuit starts closed. */
  onState?: (state: BreakerState) => void;
}

type Action = () => Promise<unknown>;
type Ignore = ((err: unknown) => boolean) | undefined;

export class Breaker {
  private readonly circuit: CircuitBreaker<[Action, Ignore], unknown>;
  private readonly resetTimeoutMs: number;
  /** performance.now() when the circuit last opened. */
  private openedAt = 0;

  constructor(opts: BreakerOptions) {
    this.resetTimeoutMs = opts.resetTimeoutMs;
    this.circuit = new CircuitBreaker((action: Action, _ignore: Ignore) => action(), {
      timeout: opts.timeoutMs,
      errorThresholdPercentage: opts.errorThresholdPercentage,
      volumeThreshold: opts.volumeThreshold,
      resetTimeout: opts.resetTimeoutMs,
      rollingCountTimeout: opts.rollingWindowMs,
      rollingCountBuckets: 10,
      rollingPercentilesEnabled: false,
      enableSnapshots: false,
      // opossum passes the call's arguments after the error: the second is `ignore`.
      errorFilter: ((err: unknown, _action: Action, ignore: Ignore) =>
        ignore !== undefined && ignore(err)) as (err: unknown) => boolean,
    });
    this.circuit.on('open', () => (this.openedAt = performance.now()));
    if (opts.onOpen !== undefined) this.circuit.on('open', opts.onOpen);
    if (opts.onClose !== undefined) this.circuit.on('close', opts.onClose);
    const onState = opts.onState;
    if (onState !== undefined) {
      this.circuit.on('open', () => onState('open'));
      this.circuit.on('halfOpen', () => onState('half_open'));
      this.circuit.on('close', () => onState('closed'));
      onState('closed');
    }
  }

  /** closed, half_open (one trial call let through) or open. */
  get state(): 'closed' | 'half_open' | 'open' {
    if (this.circuit.halfOpen) return 'half_open';
    return this.circuit.opened ? 'open' : 'closed';
  }

  /** True while the circuit is open or half-open. */
  get opened(): boolean {
    return !this.circuit.closed;
  }

  /** Whole seconds until an open circuit lets a trial call through (≥ 1): a Retry-After value. */
  retryAfterSeconds(): number {
    if (!this.opened) return 1;
    const reopen = this.openedAt + this.resetTimeoutMs - performance.now();
    return Math.max(1, Math.ceil(reopen / 1000));
  }

  /** Runs `action` through the breaker; `ignore(err)` true excuses an error. */
  fire<T>(action: () => Promise<T>, ignore?: (err: unknown) => boolean): Promise<T> {
    return this.circuit.fire(action, ignore) as Promise<T>;
  }

  /** Refuses every later call (ESHUTDOWN) and stops the breaker's timers. */
  shutdown(): void {
    this.circuit.shutdown();
  }
}
