/**
 * One admitted write's in-flight entry, finished exactly once. While the request is
 * only admitted (held), a client disconnect finishes it; once it is being forwarded,
 * only the upstream settling (answer, error or timeout) finishes it, because a
 * request the client gave up on may still be applied by the upstream.
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
  ) {}

  get finished(): boolean {
    return this.phase === 'done';
  }

  /** The upstream request was sent. */
  forwarding(): void {
    if (this.phase === 'held') this.phase = 'forwarding';
  }

  /** The upstream answered, failed, or timed out. */
  upstreamSettled(): void {
    this.finish();
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
