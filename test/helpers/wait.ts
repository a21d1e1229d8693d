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
