/**
 * The gateway's reason vocabularies: why a fenced write was refused (the fence verdict,
 * ./verdict.ts) and why a forwarded request was cut (./forward-guard.ts). Their labels
 * in fencegate_fenced_writes_total{reason} and fencegate_forwards_cut_total{reason}, and
 * the reasons of `fenced-write` events, are these lists. A leaf (it imports nothing), so
 * the metrics and events modules read them without depending on the gateway.
 */

/** Why the fence refused a write (Verdict.reason). */
export const FENCED_REASONS = ['stale', 'forged', 'missing', 'lease', 'malformed', 'unavailable'] as const;
export type FencedReason = (typeof FENCED_REASONS)[number];

/** Why the gateway cut a forwarded request (ForwardGuard). */
export const CUT_REASONS = [
  'body-idle',
  'upload-time',
  'upstream-late',
  'session-lapsed',
  'upstream-encoding',
] as const;
export type CutReason = (typeof CUT_REASONS)[number];

/**
 * What became of a request with an idempotency key (./idempotency.ts), the outcome label
 * of fencegate_idempotency_total: begun (forwarded as the first of its key), replayed,
 * in-flight (409), mismatch (422); then, for a begun one, stored (its answer kept) or
 * abandoned (refused before the upstream, forward failed, or an answer not kept: 5xx, 408, 429).
 */
export const IDEMPOTENCY_OUTCOMES = [
  'begun',
  'replayed',
  'in-flight',
  'mismatch',
  'stored',
  'abandoned',
] as const;
export type IdempotencyOutcome = (typeof IDEMPOTENCY_OUTCOMES)[number];
