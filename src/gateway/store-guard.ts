/**
 * Store calls on the request path, behind a circuit breaker (src/breakers/circuit.ts): while the
 * store is down, fenced writes fail fast with 503 fence-unavailable instead of each
 * waiting for a timeout. Its state is fencegate_breaker_state{breaker="store"}; store
 * failures are counted where the store is instrumented (src/observe/store-metrics.ts).
 */
import { Breaker } from '../breakers/circuit.js';
import { ProblemError } from '../errors.js';
import { STORE_BREAKER, type Metrics } from '../observe/metrics.js';
import type { AdmitRequest, AdmitResult, Store } from '../store/types.js';

export interface StoreGuardOptions {
  /** A store call slower than this counts as a failure (the request gets 503). Default 2000 ms. */
  timeoutMs?: number;
  /** How long the breaker stays open before letting a trial call through. Default 5000 ms. */
  resetTimeoutMs?: number;
  /** Failure share (%) in the rolling window that opens the breaker. Default 50. */
  errorThresholdPercentage?: number;
  /** Calls in the window before the breaker may open. Default 5. */
  volumeThreshold?: number;
}

export interface GuardLog {
  warn(obj: object, msg: string): void;
}

/** Where an entry that could not be finished now goes to be finished later (GatewaySessions.finishLater). */
export type FinishLater = (lock: string, requestId: string) => void;

export class StoreGuard {
  private readonly breaker: Breaker;

  constructor(
    private readonly store: Store,
    metrics: Metrics,
    private readonly log: GuardLog,
    options: StoreGuardOptions = {},
    /** Takes the entries this guard could not finish (null: they are only logged). */
    private readonly finishLater: FinishLater | null = null,
  ) {
    this.breaker = new Breaker({
      timeoutMs: options.timeoutMs ?? 2000,
      resetTimeoutMs: options.resetTimeoutMs ?? 5000,
      errorThresholdPercentage: options.errorThresholdPercentage ?? 50,
      volumeThreshold: options.volumeThreshold ?? 5,
      rollingWindowMs: 10_000,
      onOpen: () =>
        this.log.warn(
          { store: store.kind },
          'fence store circuit opened: fenced writes get 503 until it recovers',
        ),
      onClose: () => this.log.warn({ store: store.kind }, 'fence store circuit closed'),
      onState: (state) => metrics.setBreakerState(STORE_BREAKER, state),
    });
  }

  /**
   * Admission. When it fails on our side after it was sent, the store may still apply
   * it: the breaker's timeout fired first and the answer comes later, or the answer was
   * lost (a paused store, a network cut holding the command in the send queue until the
   * link is back). Its in-flight entry would then hold back every higher token of the
   * lock for as long as this gateway's session lives, so it is finished: at once when a
   * late answer says it was admitted, else after the next beat the store acknowledges
   * (the gateway session retries it) — on Redis behind the lost command on the same
   * connection, so it cannot overtake it. Finishing an entry that was never made is a
   * no-op.
   */
  admit(req: AdmitRequest): Promise<AdmitResult> {
    let pending: Promise<AdmitResult> | undefined;
    return this.call('admit', () => (pending = this.store.admit(req))).catch((err: unknown) => {
      if (req.record === true && pending !== undefined) {
        const { lock, requestId } = req;
        pending.then(
          (r) => (r.ok ? this.finish(lock, requestId) : undefined),
          () => this.finishLater?.(lock, requestId),
        );
      }
      throw err;
    });
  }

  /** Marks an entry as delivering (Store.deliver) before its write is sent. */
  deliver(lock: string, requestId: string, boundMs: number) {
    return this.call('deliver', () => this.store.deliver(lock, requestId, boundMs));
  }

  lowerInflight(lock: string, token: bigint) {
    return this.call('lowerInflight', () => this.store.lowerInflight(lock, token));
  }

  dropInflight(lock: string, sessions: readonly string[], maxBoundMs: number) {
    return this.call('dropInflight', () => this.store.dropInflight(lock, sessions, maxBoundMs));
  }

  readSessions(ids: readonly string[] | null) {
    return this.call('readSessions', () => this.store.readSessions(ids));
  }

  endSession(id: string, ifBeat: number | null) {
    return this.call('endSession', () => this.store.endSession(id, ifBeat));
  }

  watch(lock: string, listener: () => void) {
    return this.call('watch', () => this.store.watch(lock, listener));
  }

  /**
   * Removes an in-flight entry. Bypasses the breaker (a finish must be tried even
   * while it is open) and never throws: an entry that cannot be removed now is handed
   * to `finishLater` (the gateway session retries it once the store answers again).
   */
  finish(lock: string, requestId: string): Promise<void> {
    return this.store.finish(lock, requestId).catch((err: unknown) => {
      this.log.warn(
        { err, lock, requestId },
        'could not finish in-flight entry; retrying after the next beat',
      );
      this.finishLater?.(lock, requestId);
    });
  }

  /** The store breaker's state (for GET /v1/status). */
  get breakerState(): 'closed' | 'half_open' | 'open' {
    return this.breaker.state;
  }

  shutdown(): void {
    this.breaker.shutdown();
  }

  /** Promise chains rather than async frames: every fenced admission comes through here. */
  private call<T>(op: string, fn: () => Promise<T>): Promise<T> {
    return this.breaker
      .fire(() => {
        const p = fn();
        p.catch(() => undefined); // a call that outlives the breaker's timeout must not go unhandled
        return p;
      })
      .catch((err: unknown) => {
        throw this.unavailable(err, op);
      });
  }

  private unavailable(err: unknown, op: string): ProblemError {
    const code = (err as { code?: unknown } | null)?.code;
    const open = code === 'EOPENBREAKER';
    const retryAfter = open ? this.breaker.retryAfterSeconds() : 1;
    const detail = open
      ? 'the fence store is unavailable (circuit open); the write was not forwarded'
      : code === 'ETIMEDOUT'
        ? `the fence store did not answer ${op} in time; the write was not forwarded`
        : 'the fence store is unavailable; the write was not forwarded';
    return new ProblemError(
      'fence-unavailable',
      detail,
      {},
      { cause: err, headers: { 'retry-after': String(retryAfter) } },
    );
  }
}
