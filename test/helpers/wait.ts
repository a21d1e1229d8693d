/** Waiting in tests: a pause, and polling a condition until it holds. */

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `test` every `everyMs` until it holds or `ms` passed; says whether it held. */
export async function until(
  test: () => boolean | Promise<boolean>,
  ms = 5000,
  everyMs = 10,
): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!(await test())) {
    if (Date.now() >= deadline) return false;
    await sleep(everyMs);
  }
  return true;
}

export interface WaitOptions {
  /** Give up after this long (default 5000 ms). */
  timeoutMs?: number;
  /** Poll this often (default 10 ms). */
  everyMs?: number;
  /** The error's message when it gives up (default `timed out waiting for ${what}`). */
  message?: string;
}

/**
 * Polls `test` every `everyMs` until it holds; throws once `timeoutMs` passed without it.
 * The test is asked first, then the deadline checked, then the pause taken.
 */
export async function waitUntil(
  what: string,
  test: () => boolean | Promise<boolean>,
  { timeoutMs = 5000, everyMs = 10, message }: WaitOptions = {},
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await test())) {
    if (Date.now() > end) throw new Error(message ?? `timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}
