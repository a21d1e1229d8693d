/**
 * The drain barrier: a write whose admission found admitted lower-token writes still
 * in flight waits until they are gone, so it never overtakes them on the way to the
 * upstream. It subscribes to the lock's notifications before re-checking (no lost
 * wake-ups) and sleeps until a notification or the earliest in-flight deadline —
 * never a tight poll — bounded by the route's drain timeout.
 */
import type { FencingToken } from '../tokens.js';
import type { StoreGuard } from './store-guard.js';

export type DrainOutcome = 'cleared' | 'timeout' | 'aborted';

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

/** Throws the guard's ProblemError (fence-unavailable) when the store fails while waiting. */
export async function awaitDrain(
  guard: StoreGuard,
  lock: string,
  token: FencingToken,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<DrainOutcome> {
  const deadline = Date.now() + timeoutMs;
  const wakeup = new Wakeup();
  const unsubscribe = await guard.watch(lock, () => wakeup.notify());
  try {
    for (;;) {
      if (signal.aborted) return 'aborted';
      const state = await guard.lowerInflight(lock, token);
      if (state.count === 0) return 'cleared';
      const remaining = deadline - Date.now();
      if (remaining <= 0) return 'timeout';
      const untilLapse =
        state.nextDeadline === null ? remaining : Math.max(1, state.nextDeadline - state.now + 1);
      await wakeup.wait(Math.min(remaining, untilLapse), signal);
    }
  } finally {
    unsubscribe();
  }
}
