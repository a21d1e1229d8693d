/**
 * The drain barrier: a write whose admission found admitted lower-token writes still
 * in flight waits until they are gone, so it never overtakes them on the way to the
 * upstream. It subscribes to the lock's notifications before re-checking (no lost
 * wake-ups) and sleeps until a notification, until a silent gateway session could be
 * judged dead (docs/adr/0005), or until a gone session's delivered writes are past their
 * lock-delay (docs/adr/0018) — never a tight poll — bounded by the route's drain timeout.
 */
import type { InflightState } from '../store/types.js';
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

/** One write's wait at the barrier. */
export interface DrainWait {
  guard: StoreGuard;
  observer: SessionObserver;
  /** The session the waiting write was admitted under: it must stay valid while it waits. */
  lease: SessionLease;
  lock: string;
  token: FencingToken;
  timeoutMs: number;
  signal: AbortSignal;
  /**
   * Called once, when the write finds itself waiting on writes that a gone gateway
   * session was delivering (their lock-delay, lock-delay.ts), with the longest delay left.
   */
  onLockDelay?: (leftMs: number) => void;
}

/**
 * Waits until no lower-token entry of a live gateway session, and no delivering entry
 * of a gone one within its lock-delay, is in flight for `lock`. Entries of sessions the
 * observer finds gone are dropped: at once when they were not delivering, once their
 * lock-delay passed when they were. Returns 'lapsed' when this process's own session
 * stops being valid while it waits: it must not forward then. Throws the guard's
 * ProblemError (fence-unavailable) when the store fails while waiting.
 */
export async function awaitDrain(w: DrainWait): Promise<DrainOutcome> {
  const { guard, observer, lease, lock, token, signal } = w;
  const deadline = performance.now() + w.timeoutMs;
  const wakeup = new Wakeup();
  const unsubscribe = await guard.watch(lock, () => wakeup.notify());
  let announced = false;
  try {
    for (;;) {
      if (signal.aborted) return 'aborted';
      if (!lease.valid) return 'lapsed';
      const state = await guard.lowerInflight(lock, token);
      if (state.count === 0) return 'cleared';
      const verdict = await observer.judge(state.sessions);
      const delay = verdict.dead.length > 0 ? await dropGone(w, state, verdict.dead) : null;
      if (delay === null && verdict.dead.length > 0 && verdict.dead.length === state.sessions.length)
        continue;
      if (delay !== null && !announced) {
        announced = true;
        w.onLockDelay?.(delay.longest);
      }
      const now = performance.now();
      const remaining = deadline - now;
      if (remaining <= 0) return 'timeout';
      const untilVerdict = Math.min(verdict.retryInMs ?? remaining, delay?.shortest ?? remaining);
      const untilLapse = Math.max(1, lease.validUntil - now);
      await wakeup.wait(Math.max(1, Math.min(remaining, untilVerdict, untilLapse)), signal);
    }
  } finally {
    unsubscribe();
  }
}

/**
 * Drops the entries of gone sessions that no longer count (each session's, up to the
 * largest bound among its lower entries, once its lock-delay passed; at once when none
 * was delivering). Returns the lock-delay left of those that still count (the shortest,
 * to wake then, and the longest), or null when none does.
 */
async function dropGone(
  w: DrainWait,
  state: InflightState,
  dead: readonly string[],
): Promise<{ shortest: number; longest: number } | null> {
  const droppable = new Map<number, string[]>();
  let shortest = Infinity;
  let longest = 0;
  for (const id of dead) {
    const bound = state.bounds[state.sessions.indexOf(id)] ?? 0;
    const left = w.observer.delayLeft(id, bound);
    if (left > 0) {
      shortest = Math.min(shortest, left);
      longest = Math.max(longest, left);
      continue;
    }
    const ids = droppable.get(bound);
    if (ids === undefined) droppable.set(bound, [id]);
    else ids.push(id);
  }
  for (const [bound, ids] of droppable) await w.guard.dropInflight(w.lock, ids, bound);
  return longest > 0 ? { shortest, longest } : null;
}
