/**
 * A circuit breaker for the request path, with opossum's semantics for the options the
 * gateway uses, at a fraction of its per-call cost (opossum emits several events and
 * keeps per-call latency arrays for every call; this keeps two counters per bucket).
 *
 * - Every call counts as a fire in a rolling window of `rollingWindowMs` (10 buckets).
 * - A failure (an error not excused by `ignore`, or a call slower than `timeoutMs`)
 *   opens the circuit once the window has at least `volumeThreshold` fires and more than
 *   `errorThresholdPercentage` % of them failed.
 * - While open, calls are refused at once with code `EOPENBREAKER`. After
 *   `resetTimeoutMs` one trial call is let through (half-open): success closes the
 *   circuit, failure opens it again; other calls during the trial are refused.
 * - Errors excused by `ignore` count as successes (as opossum's errorFilter), and are
 *   still passed to the caller.
 */

export interface BreakerOptions {
  /** A call slower than this fails with code ETIMEDOUT; false: no timeout. */
  timeoutMs: number | false;
  errorThresholdPercentage: number;
  volumeThreshold: number;
  resetTimeoutMs: number;
  rollingWindowMs: number;
  onOpen?: () => void;
  onClose?: () => void;
}

const BUCKETS = 10;

type State = 'closed' | 'open' | 'half-open';

export class BreakerError extends Error {
  constructor(
    message: string,
    readonly code: 'EOPENBREAKER' | 'ETIMEDOUT' | 'ESHUTDOWN',
  ) {
    super(message);
    this.name = 'BreakerError';
  }
}

export class Breaker {
  private state: State = 'closed';
  private openedAt = 0;
  private trialPending = false;
  private isShutdown = false;
  private readonly bucketMs: number;
  // Ring of buckets: the bucket number (time / bucketMs) each slot holds, and its counts.
  private readonly slot = new Array<number>(BUCKETS).fill(-1);
  private readonly fires = new Array<number>(BUCKETS).fill(0);
  private readonly failures = new Array<number>(BUCKETS).fill(0);

  constructor(private readonly opts: BreakerOptions) {
    this.bucketMs = Math.max(1, opts.rollingWindowMs / BUCKETS);
  }

  get opened(): boolean {
    return this.state !== 'closed';
  }

  fire<T>(action: () => Promise<T>, ignore?: (err: unknown) => boolean): Promise<T> {
    if (this.isShutdown)
      return Promise.reject(new BreakerError('The circuit has been shutdown.', 'ESHUTDOWN'));
    const now = Date.now();
    const i = this.bucket(now);
    this.fires[i] = (this.fires[i] ?? 0) + 1;
    if (this.state === 'open' && now - this.openedAt >= this.opts.resetTimeoutMs) {
      this.state = 'half-open';
      this.trialPending = false;
    }
    let trial = false;
    if (this.state !== 'closed') {
      if (this.state === 'open' || this.trialPending) {
        return Promise.reject(new BreakerError('Breaker is open', 'EOPENBREAKER'));
      }
      this.trialPending = true;
      trial = true;
    }
    let promise: Promise<T>;
    try {
      promise = action();
    } catch (err) {
      promise = Promise.reject(err as Error);
    }
    const settle = (failed: boolean) => (failed ? this.failed(trial) : this.succeeded(trial));
    const timeoutMs = this.opts.timeoutMs;
    if (timeoutMs === false) {
      return promise.then(
        (value) => {
          settle(false);
          return value;
        },
        (err: unknown) => {
          settle(ignore === undefined || !ignore(err));
          throw err;
        },
      );
    }
    return new Promise<T>((resolve, reject) => {
      let done = false;
      const timer = setTimeout(() => {
        done = true;
        settle(true);
        reject(new BreakerError(`Timed out after ${timeoutMs}ms`, 'ETIMEDOUT'));
      }, timeoutMs);
      promise.then(
        (value) => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          settle(false);
          resolve(value);
        },
        (err: unknown) => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          settle(ignore === undefined || !ignore(err));
          reject(err as Error);
        },
      );
    });
  }

  shutdown(): void {
    this.isShutdown = true;
  }

  private succeeded(trial: boolean): void {
    if (trial && this.state === 'half-open') {
      this.state = 'closed';
      this.trialPending = false;
      this.opts.onClose?.();
    }
  }

  private failed(trial: boolean): void {
    const i = this.bucket(Date.now());
    this.failures[i] = (this.failures[i] ?? 0) + 1;
    if (this.state === 'open') return;
    if (this.state === 'half-open') {
      if (trial) this.open();
      return;
    }
    const oldest = Math.floor(Date.now() / this.bucketMs) - BUCKETS;
    let fires = 0;
    let failures = 0;
    for (let b = 0; b < BUCKETS; b++) {
      if ((this.slot[b] ?? -1) <= oldest) continue; // a bucket from before the window
      fires += this.fires[b] ?? 0;
      failures += this.failures[b] ?? 0;
    }
    if (fires < this.opts.volumeThreshold) return;
    if ((failures / fires) * 100 > this.opts.errorThresholdPercentage) this.open();
  }

  private open(): void {
    this.state = 'open';
    this.openedAt = Date.now();
    this.trialPending = false;
    this.opts.onOpen?.();
  }

  /** The ring slot for time `now`, cleared when it last held an older bucket. */
  private bucket(now: number): number {
    const n = Math.floor(now / this.bucketMs);
    const i = n % BUCKETS;
    if (this.slot[i] !== n) {
      this.slot[i] = n;
      this.fires[i] = 0;
      this.failures[i] = 0;
    }
    return i;
  }
}
