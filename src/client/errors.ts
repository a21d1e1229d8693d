/**
 * Errors raised by the client SDK. Every problem code the server sends maps to one class
 * (CODE_ERRORS, held to the server's catalogue by test/unit/client-errors.test.ts); what
 * goes wrong before an answer arrives (no connection, a timeout, the caller's abort) has
 * a class of its own, with the underlying error as `cause`. Nothing the SDK throws is a
 * bare `TypeError: fetch failed`.
 */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail?: string;
  [extra: string]: unknown;
}

export class FencegateError extends Error {
  override name = 'FencegateError';
  constructor(
    message: string,
    /** The HTTP status of the answer; 0 when no answer arrived (or the client judged it). */
    readonly status: number,
    readonly problem: Problem | null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  /** The problem code, e.g. "lock-held", from `urn:fencegate:lock-held`. */
  get code(): string | null {
    return this.problem?.type.startsWith('urn:fencegate:') ? this.problem.type.slice(14) : null;
  }

  /** The lock the problem names (its `lock` field), if any. */
  get lock(): string | null {
    const v = this.problem?.['lock'];
    return typeof v === 'string' ? v : null;
  }

  /** The answer's Retry-After header, in ms (set by errorFor). */
  retryAfterHeaderMs: number | null = null;

  /** `retryAfterMs` of the problem, else its Retry-After header in ms, when the server sent one. */
  get retryAfterMs(): number | null {
    const v = this.problem?.['retryAfterMs'];
    return typeof v === 'number' ? v : this.retryAfterHeaderMs;
  }
}

/** The request was refused as malformed or not allowed by the route (4xx): a bug to fix, not to retry. */
export class RequestError extends FencegateError {
  override name = 'RequestError';
}

/** No valid credential (401 `unauthenticated`), or the principal is not granted this (403 `forbidden`). */
export class AuthError extends FencegateError {
  override name = 'AuthError';
}

/** The thing asked about does not exist (404). */
export class NotFoundError extends FencegateError {
  override name = 'NotFoundError';
}

/** Acquire gave up: the lock stayed held (or others were queued ahead) for the whole waitMs. */
export class LockHeldError extends FencegateError {
  override name = 'LockHeldError';
}

/** The owner holds a lock that sorts after this one (409 `lock-order`, with `--refuse-lock-order`). */
export class LockOrderError extends FencegateError {
  override name = 'LockOrderError';
  get heldKey(): string | null {
    const v = this.problem?.['heldKey'];
    return typeof v === 'string' ? v : null;
  }
}

/** The lease is gone (expired, taken over, released, or could not be renewed in time): stop working. */
export class LeaseLostError extends FencegateError {
  override name = 'LeaseLostError';
}

/** The key issued its last possible token (409 `tokens-exhausted`): use another key. */
export class TokensExhaustedError extends FencegateError {
  override name = 'TokensExhaustedError';
}

/**
 * The gateway refused a write because this token is no longer the lock's current one:
 * older than one admitted (`stale-token`), its lease no longer live (`lease-expired`),
 * or never issued (`token-invalid`). The write did not reach the resource. From
 * `lock.fetch` it also ends the lock (its signal fires).
 */
export class StaleTokenError extends FencegateError {
  override name = 'StaleTokenError';
  /** The token presented, when the problem names it. */
  get token(): bigint | null {
    return bigField(this.problem, 'token');
  }
  /** The highest token admitted for the lock, when known. */
  get highest(): bigint | null {
    return bigField(this.problem, 'highest');
  }
}

/** The server is up but a dependency is not (503): retry later (`retryAfterMs`). */
export class UnavailableError extends FencegateError {
  override name = 'UnavailableError';
}

/** The gateway could not judge the write (503 `fence-unavailable`): it was not forwarded. */
export class FenceUnavailableError extends UnavailableError {
  override name = 'FenceUnavailableError';
}

/** The issuer's store is down (503 `store-unavailable`): nothing was granted, renewed or released. */
export class StoreUnavailableError extends UnavailableError {
  override name = 'StoreUnavailableError';
}

/**
 * The server asks to be asked again later: too many requests from this client or in all
 * (429 `auth-throttled`, `auth-busy`, `too-many-streams`), or the same idempotent request
 * is still being served (409 `idempotency-in-flight`). `retryAfterMs` says when.
 */
export class BusyError extends FencegateError {
  override name = 'BusyError';
}

/** The gateway reached the upstream badly or not at all (502, 504). */
export class UpstreamError extends FencegateError {
  override name = 'UpstreamError';
}

/** No answer arrived in time (the client's requestTimeoutMs). `cause`: the timeout. */
export class TimeoutError extends FencegateError {
  override name = 'TimeoutError';
}

/** The server could not be reached or the connection failed. `cause`: the platform's error. */
export class NetworkError extends FencegateError {
  override name = 'NetworkError';
}

/** The caller's signal aborted the call (or, on `lock.signal`, the lock). `cause`: its reason. */
export class AbortedError extends FencegateError {
  override name = 'AbortedError';
}

/**
 * withLock/withLocks: the work finished but the release failed (the issuer could not be
 * reached, or the lease was no longer held: it lapsed while the work ran). `value` is what
 * the work returned; `cause` why the release failed.
 */
export class ReleaseError<T = unknown> extends FencegateError {
  override name = 'ReleaseError';
  constructor(
    message: string,
    readonly value: T,
    options: { cause: unknown },
  ) {
    super(message, 0, null, options);
  }
}

type ErrorClass = new (message: string, status: number, problem: Problem | null) => FencegateError;

/** The class each problem code is raised as. */
export const CODE_ERRORS: Readonly<Record<string, ErrorClass>> = {
  'bad-request': RequestError,
  'invalid-key': RequestError,
  'invalid-ttl': RequestError,
  'invalid-query': RequestError,
  'token-malformed': RequestError,
  'token-required': RequestError,
  'sequencer-required': RequestError,
  'payload-too-large': RequestError,
  'request-timeout': RequestError,
  'headers-too-large': RequestError,
  'expectation-failed': RequestError,
  'invalid-row': RequestError,
  'bucket-write': RequestError,
  'delete-objects-invalid': RequestError,
  'request-unfenceable': RequestError,
  'virtual-host-refused': RequestError,
  'method-not-allowed': RequestError,
  'constraint-violation': RequestError,
  'idempotency-mismatch': RequestError,
  'host-not-allowed': RequestError,
  'unsupported-media-type': RequestError,
  unauthenticated: AuthError,
  forbidden: AuthError,
  'lock-not-found': NotFoundError,
  'row-not-found': NotFoundError,
  'no-route': NotFoundError,
  'not-found': NotFoundError,
  'lock-held': LockHeldError,
  'lock-order': LockOrderError,
  'lease-lost': LeaseLostError,
  'replay-ended': LeaseLostError,
  'not-owner': LeaseLostError,
  'tokens-exhausted': TokensExhaustedError,
  'stale-token': StaleTokenError,
  'lease-expired': StaleTokenError,
  'token-invalid': StaleTokenError,
  'auth-throttled': BusyError,
  'auth-busy': BusyError,
  'too-many-streams': BusyError,
  'idempotency-in-flight': BusyError,
  'fence-unavailable': FenceUnavailableError,
  'store-unavailable': StoreUnavailableError,
  'upstream-unavailable': UpstreamError,
  'upstream-timeout': UpstreamError,
  'forward-interrupted': UpstreamError,
  internal: FencegateError,
};

/**
 * The typed error for a refused answer: by its problem code, by status when there is no
 * problem body. `retryAfter`: the answer's Retry-After header (seconds), if any.
 */
export function errorFor(
  message: string,
  status: number,
  problem: Problem | null,
  retryAfter: string | null = null,
): FencegateError {
  const err = new (errorClass(status, problem))(message, status, problem);
  if (retryAfter !== null && /^[0-9]+$/.test(retryAfter)) err.retryAfterHeaderMs = Number(retryAfter) * 1000;
  return err;
}

function errorClass(status: number, problem: Problem | null): ErrorClass {
  const code = problem?.type.startsWith('urn:fencegate:') ? problem.type.slice(14) : null;
  const known = code === null ? undefined : CODE_ERRORS[code];
  if (known !== undefined) return known;
  if (status === 401 || status === 403) return AuthError;
  if (status === 503) return UnavailableError;
  if (status === 502 || status === 504) return UpstreamError;
  if (status >= 400 && status < 500) return RequestError;
  return FencegateError;
}

function bigField(problem: Problem | null, field: string): bigint | null {
  const v = problem?.[field];
  return typeof v === 'string' && /^[0-9]+$/.test(v) ? BigInt(v) : null;
}
