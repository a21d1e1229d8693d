/**
 * The lock-delay: how long a write that may already be at its upstream keeps counting at
 * the drain barrier once the gateway that sent it stopped (docs/adr/0018-lock-delay.md).
 *
 * A gateway's session bounds how long its in-flight entries count if it dies or stops
 * (ADR 0005), but a session that lapses sends nothing more: bytes already delivered are
 * another matter. The upstream may still be working on such a write, and is assumed to
 * apply or drop it within the route's upstream bound of receiving it. So an entry whose
 * write was delivering counts, after its session ended, for that bound (plus a margin
 * for the rates of monotonic clocks, as the session's own margin) from when a gateway saw
 * the session gone; the next owner's write waits that long, as behind Chubby's
 * lock-delay. Healthy traffic pays nothing: a live gateway finishes its entries when the
 * upstream answers.
 *
 * Kinds that compare-and-set inside the resource (the postgres kind, `fenceAt:
 * 'resource'`) record no entry at all: the resource refuses an older write in the same
 * transaction that would apply it, however late it arrives, so they need no delay.
 */
import type { CompiledRoute } from '../policy/index.js';

/**
 * The delivery bound of a route's writes: the longest the upstream may take to apply a
 * write once it received it. The upstream's `timeoutMs`: the gateway gives up on an
 * answer after that long, and the docs ask operators to keep the upstream's own request
 * timeout below it.
 */
export function deliveryBoundMs(route: CompiledRoute): number {
  return route.upstream.timeoutMs;
}

/**
 * How long an observer counts a delivering entry after it saw the entry's session gone:
 * the bound plus a quarter, for monotonic clocks that run at rates up to 25 % apart (the
 * same tolerance as the session margin, ADR 0005).
 */
export function lockDelayMs(boundMs: number): number {
  return boundMs <= 0 ? 0 : Math.ceil(boundMs * 1.25);
}
