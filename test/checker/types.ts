/**
 * The history checker's inputs and result. Three records of one run, each in its
 * own order: what the upstream applied, what the issuer granted, what the clients
 * saw. Tokens are decimal strings here, as on the wire; the checker reads them as
 * bigint and never as JS numbers. See docs/checker.md.
 */

/** One write the upstream applied, in the order it applied them. */
export interface AppliedRecord {
  /** The upstream's own sequence number; must increase strictly along the record. */
  seq: number;
  lock: string;
  /** The Fencing-Token the write arrived with, as received ('' or garbage if none or bad). */
  token: string;
  /**
   * Owner / client id of the writer, if the upstream knows it. When absent, the
   * checker takes the owner the token was granted to.
   */
  writer?: string;
  /**
   * Joins the write to a client operation with the same requestId (same lock).
   * Writes whose id matches no operation are matched by (lock, token, writer).
   */
  requestId?: string | null;
  path?: string;
  at?: string | number;
}

/** One grant the issuer made (a successful acquire). */
export interface GrantRecord {
  lock: string;
  token: string;
  owner: string;
  leaseId: string;
  /**
   * Store-clock ms of the grant. When two grants of one lock both carry it, the
   * later one must have the higher token.
   */
  grantedAt?: number;
}

/** HTTP status the gateway answered, or what the client saw instead of an answer. */
export type OperationStatus = number | 'error' | 'timeout';

/** One write attempt, as the client saw it. */
export interface ClientOperation {
  lock: string;
  /** The Fencing-Token the client sent, as sent; null when it sent none. */
  token: string | null;
  writer: string;
  requestId: string;
  status: OperationStatus;
  /** True exactly when the gateway answered 2xx. */
  acknowledged: boolean;
}

export interface History {
  applied: readonly AppliedRecord[];
  grants: readonly GrantRecord[];
  operations: readonly ClientOperation[];
}

export interface CheckOptions {
  /** Statuses meaning "refused by the gateway, not forwarded". Default: 400, 403, 409, 428, 503. */
  refusedStatuses?: readonly number[];
  /** Events shown either side of the violating one. Default 3. */
  contextSize?: number;
  /**
   * The client record holds every write sent through the gateway. Then an applied
   * write that no operation accounts for (e.g. an upstream retry applying one
   * request twice) is a 'phantom-write'. Default false.
   */
  clientRecordComplete?: boolean;
}

export const DEFAULT_REFUSED_STATUSES: readonly number[] = [400, 403, 409, 428, 503];

export type ViolationKind =
  /** An input record is unusable: a grant's token is not canonical, seq does not increase… */
  | 'malformed-input'
  /** (c) One token of one lock granted to two owners or two leases. */
  | 'duplicate-grant'
  /** Tokens of one lock do not increase with grantedAt. */
  | 'grant-regression'
  /** (e) An applied write's token was never granted for its lock, or not to its writer. */
  | 'ungranted-token'
  /** (b) A write from an earlier owner applied after a later owner's write. */
  | 'stale-owner'
  /** (a) Applied tokens decreased, within one owner's writes. */
  | 'token-regression'
  /** (f) A write the gateway refused was applied anyway. */
  | 'refused-applied'
  /** With clientRecordComplete: an applied write no client operation accounts for. */
  | 'phantom-write'
  /** (d) A write the gateway acknowledged is missing from the upstream's record. */
  | 'lost-ack';

export type HistoryEvent =
  | { source: 'applied'; index: number; record: AppliedRecord }
  | { source: 'grant'; index: number; record: GrantRecord }
  | { source: 'client'; index: number; record: ClientOperation };

export interface ContextEntry {
  /** 'violation': the offending event; 'related': the event it conflicts with. */
  mark: 'violation' | 'related' | null;
  event: HistoryEvent;
}

export interface Violation {
  kind: ViolationKind;
  lock: string;
  message: string;
  /** Events of the same lock and record around the violation, in record order. */
  context: ContextEntry[];
}

export interface CheckStats {
  locks: number;
  grants: number;
  applied: number;
  operations: number;
  acknowledged: number;
  refused: number;
  /** Operations with no clear outcome (timeout, error, 502, 504…): applied or not. */
  indeterminate: number;
  /** Applied writes matched to an operation by requestId (the rest by lock, token and writer). */
  joinedByRequestId: number;
}

export type CheckResult =
  { ok: true; stats: CheckStats } | { ok: false; violation: Violation; stats: CheckStats };
