/**
 * The Store's operations, as a list: the calls timed and counted by the store metrics
 * (src/observe/store-metrics.ts, fencegate_store_operation_duration_seconds{op} and
 * fencegate_store_errors_total{op}). Checked against the Store interface at compile
 * time: listing a name that is not a Store member, or adding a Store method without
 * listing it here (or naming it in NOT_OPERATIONS), fails the typecheck.
 */
import type { Store } from './types.js';

/** In the Store interface's order. */
export const STORE_OPS = [
  'tryAcquire',
  'renew',
  'release',
  'inspect',
  'enqueueWaiter',
  'removeWaiter',
  'listLocks',
  'recentGrants',
  'admit',
  'finish',
  'deliver',
  'lowerInflight',
  'dropInflight',
  'beginIdempotent',
  'finishIdempotent',
  'abandonIdempotent',
  'openSession',
  'beatSession',
  'readSessions',
  'endSession',
  'watch',
  'bumpEpoch',
  'now',
  'health',
] as const satisfies readonly (keyof Store)[];
export type StoreOp = (typeof STORE_OPS)[number];

/**
 * Store members that are not timed operations: its kind (a field), onReset (registers a
 * listener, synchronously) and close (the end of its life, not an operation).
 */
type NotOperation = 'kind' | 'onReset' | 'close';

/** Store members neither listed in STORE_OPS nor in NotOperation: must be none. */
type Unlisted = Exclude<keyof Store, StoreOp | NotOperation>;
const everyOperationListed: [Unlisted] extends [never] ? true : { unlisted: Unlisted } = true;
void everyOperationListed;
