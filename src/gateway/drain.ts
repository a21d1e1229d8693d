/**
 * The drain barrier: a write whose admission found admitted lower-token writes still
 * in flight waits until they are gone, so it never overtakes them on the way to the
 * upstream. It subscribes to the lock's notifications before re-checking (no lost
 * wake-ups) and sleeps until a notification, or until a silent gateway session could
 * be judged dead (docs/adr/0005) — never a tight poll — bounded by the route's drain
 * timeout.
 */
import type { FencingToken } from '../tokens.js';
import type { SessionObserver } from './observer.js';
import type { SessionLease } from './session.js';
import type { StoreGuard } from './store-guard.js';

export type DrainOutcome = 'cleared' | 'timeout' | 'aborted' | 'lapsed';

/** A wake-up flag: notify() before wait() is not lost. */
class Wakeup {
  private pending = false;
  private wake: (() => void) | null = null;

  notify(): void {
    this.pending = true;
    this.wake?.();
  }

  wait(ms: number, signal: AbortSignal): Promise<void> {
    if (this.pending || signal.aborted) {
      this.pending = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.wake = null;
        this.pending = false;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
      this.wake = done;
    });
  }
}

/**
 * Waits until no lower-token entry of a live gateway session is in flight for `lock`.
 * Entries of sessions the observer finds dead are dropped. Returns 'lapsed' when this
 * process's own session stops being valid while it waits: it must not forward then.
 * Throws the guard's ProblemError (fence-unavailable) when the store fails while waiting.
 */
export async function awaitDrain(
  guard: StoreGuard,
  observer: SessionObserver,
  lease: SessionLease,
  lock: string,
  token: FencingToken,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<DrainOutcome> {
  const deadline = performance.now() + timeoutMs;
  const wakeup = new Wakeup();
  const unsubscribe = await guard.watch(lock, () => wakeup.notify());
  try {
    for (;;) {
      if (signal.aborted) return 'aborted';
      if (!lease.valid) return 'lapsed';
      const state = await guard.lowerInflight(lock, token);
      if (state.count === 0) return 'cleared';
      const verdict = await observer.judge(state.sessions);
      if (verdict.dead.length > 0) {
        await guard.dropInflight(lock, verdict.dead);
        if (verdict.dead.length === state.sessions.length) continue;
      }
      const now = performance.now();
      const remaining = deadline - now;
      if (remaining <= 0) return 'timeout';
      const untilVerdict = verdict.retryInMs ?? remaining;
      const untilLapse = Math.max(1, lease.validUntil - now);
      await wakeup.wait(Math.max(1, Math.min(remaining, untilVerdict, untilLapse)), signal);
    }
  } finally {
    unsubscribe();
  }
}
