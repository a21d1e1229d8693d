/**
 * One admitted write's in-flight entry, finished exactly once. While the request is
 * only admitted (held), a client disconnect finishes it; once it is being forwarded,
 * only the upstream settling (answer, error or timeout) finishes it, because a
 * request the client gave up on may still be applied by the upstream. When the upstream
 * gave no answer after it may have received the whole request (the gateway cut it, the
 * connection broke), the upstream may still apply it: the entry is finished only once
 * its delivery bound passed since the request was sent (lock-delay.ts). An upstream
 * timeout (504) comes at that bound: finished at once.
 *
 * The entry counts at the barrier only while `lease` (the gateway session it was
 * admitted under) lives, so nothing may be sent under it once the lease is invalid.
 */
import type { SessionLease } from './session.js';

export class InflightEntry {
  private phase: 'held' | 'forwarding' | 'done' = 'held';

  constructor(
    readonly lease: SessionLease,
    private readonly release: () => void,
    /** The write's delivery bound (ms): how long the upstream may take to apply it once received. */
    private readonly boundMs: number,
  ) {}

  get finished(): boolean {
    return this.phase === 'done';
  }

  /** The upstream request was sent. */
  forwarding(): void {
    if (this.phase === 'held') this.phase = 'forwarding';
  }

  /** The upstream answered, failed before it had the whole request, or timed out. */
  upstreamSettled(): void {
    this.finish();
  }

  /**
   * The forward ended without an answer after the upstream may have received the whole
   * request at `sentAt` (performance.now()): finished once the bound passed since (this
   * process's own clock measured it from the send: no margin for another clock's rate).
   */
  unanswered(sentAt: number): void {
    if (this.phase === 'done') return;
    this.phase = 'done';
    const left = sentAt + this.boundMs - performance.now();
    if (left <= 0) this.release();
    else setTimeout(this.release, left).unref();
  }

  /** The client connection closed (response sent, or aborted). */
  clientClosed(): void {
    if (this.phase === 'held') this.finish();
  }

  /** Finish now (refused at the drain barrier, or never forwarded). Idempotent. */
  finish(): void {
    if (this.phase === 'done') return;
    this.phase = 'done';
    this.release();
  }
}
