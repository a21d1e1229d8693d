/** The fencing history checker, for tests. See docs/checker.md. */
export { checkHistory } from './history.js';
export { describeEvent, formatViolation } from './events.js';
export { appliedFromSample, orderLock } from './sample.js';
export type {
  AppliedRecord,
  CheckOptions,
  CheckResult,
  CheckStats,
  ClientOperation,
  ContextEntry,
  GrantRecord,
  History,
  HistoryEvent,
  OperationStatus,
  Violation,
  ViolationKind,
} from './types.js';
export { DEFAULT_REFUSED_STATUSES } from './types.js';
