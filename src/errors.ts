/**
 * The catalogue of problem codes. Every refusal fencegate sends is an RFC 9457
 * problem (`application/problem+json`) whose `type` is `urn:fencegate:<code>`.
 * Each code is listed here once, and documented in docs/errors.md (a test keeps
 * the two in step).
 */
export const PROBLEMS = {
  'bad-request': { status: 400, title: 'The request is malformed' },
  'invalid-key': { status: 400, title: 'The lock key is not valid' },
  'invalid-ttl': { status: 400, title: 'ttlMs is out of bounds' },
  'invalid-query': { status: 400, title: 'A query parameter of this listing is not valid' },
  'token-malformed': { status: 400, title: 'The fencing token is malformed' },
  'lock-held': { status: 409, title: 'The lock is held, or other waiters are queued ahead' },
  'lock-order': {
    status: 409,
    title: 'The owner holds a lock that sorts after this one (canonical lock order)',
  },
  'replay-ended': { status: 409, title: 'The lease granted to this requestId is no longer current' },
  'lease-lost': { status: 409, title: 'The lease has expired or was taken over' },
  'not-owner': { status: 409, title: 'The lease does not hold the lock' },
  'lock-not-found': { status: 404, title: 'No token was ever issued for this lock' },
  'stale-token': { status: 409, title: 'The fencing token is older than one already admitted' },
  'lease-expired': { status: 409, title: 'The lease of this token is no longer live' },
  'token-required': { status: 428, title: 'This route requires a Fencing-Token header' },
  'sequencer-required': { status: 428, title: 'This route requires a Fencing-Sequencer header' },
  unauthenticated: { status: 401, title: 'A valid credential is required' },
  forbidden: { status: 403, title: 'The principal is not granted this' },
  'host-not-allowed': { status: 421, title: 'This listener does not answer for the Host the request names' },
  'auth-throttled': { status: 429, title: 'Too many failed authentications from this client; retry later' },
  'auth-busy': { status: 429, title: 'Too many credentials are waiting to be verified; retry later' },
  'too-many-streams': { status: 429, title: 'Too many event streams are open' },
  'token-invalid': { status: 403, title: 'The fencing token was never issued for this lock' },
  'fence-unavailable': { status: 503, title: 'The fence store is unavailable; the write was not forwarded' },
  'store-unavailable': { status: 503, title: 'The lock store is unavailable' },
  'no-route': { status: 404, title: 'No route matches this request' },
  'upstream-unavailable': { status: 502, title: 'The upstream could not be reached' },
  'upstream-timeout': { status: 504, title: 'The upstream did not answer in time' },
  'forward-interrupted': { status: 502, title: 'The gateway cut the request while forwarding it' },
  'payload-too-large': { status: 413, title: 'The request body is too large' },
  'unsupported-media-type': {
    status: 415,
    title: 'The request body is not of a media type this endpoint reads',
  },
  'request-timeout': { status: 408, title: 'The request body did not arrive in time' },
  'headers-too-large': { status: 431, title: 'The request headers are too large' },
  'expectation-failed': { status: 417, title: 'The Expect header asks for something the server does not do' },
  'tokens-exhausted': { status: 409, title: 'This lock has issued its last possible token' },
  'idempotency-in-flight': {
    status: 409,
    title: 'A request with this idempotency key is still in flight',
  },
  'idempotency-mismatch': {
    status: 422,
    title: 'This idempotency key was used for another request',
  },
  'invalid-row': { status: 400, title: 'The row in the request is not valid for this table' },
  'row-not-found': { status: 404, title: 'No row has this key' },
  'constraint-violation': { status: 409, title: 'The write violates a constraint of the table' },
  'bucket-write': { status: 400, title: 'A write to the bucket itself is not fenced by this route' },
  'delete-objects-invalid': { status: 400, title: 'The DeleteObjects body cannot be checked key by key' },
  'request-unfenceable': { status: 400, title: 'This write cannot be fenced as sent' },
  'virtual-host-refused': {
    status: 400,
    title: 'The Host may name a bucket (virtual-hosted style) that the policy does not place',
  },
  'not-found': { status: 404, title: 'Not found' },
  'method-not-allowed': { status: 405, title: 'Method not allowed' },
  internal: { status: 500, title: 'Internal error' },
} as const satisfies Record<string, { status: number; title: string }>;

export type ProblemCode = keyof typeof PROBLEMS;

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail?: string;
  [extra: string]: unknown;
}

export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** An expected refusal carried as an exception across layers that cannot return it. */
export class ProblemError extends Error {
  readonly code: ProblemCode;
  readonly status: number;
  readonly extra: Record<string, unknown>;
  readonly headers: Record<string, string>;
  private rendered: string | undefined;
  private renderedBytes: number | undefined;

  constructor(
    code: ProblemCode,
    detail?: string,
    extra: Record<string, unknown> = {},
    options: { cause?: unknown; headers?: Record<string, string> } = {},
  ) {
    super(detail ?? PROBLEMS[code].title, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'ProblemError';
    this.code = code;
    this.status = PROBLEMS[code].status;
    this.extra = extra;
    this.headers = options.headers ?? {};
  }

  /**
   * A refusal answered as part of normal operation (a stale or forged token, …): the same
   * error without a captured stack trace, which nothing reads for these and which cost more
   * than the rest of a refused request (a stale-write flood is refused at this rate).
   */
  static expected(code: ProblemCode, detail: string, extra: Record<string, unknown>): ProblemError {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      return new ProblemError(code, detail, extra);
    } finally {
      Error.stackTraceLimit = limit;
    }
  }

  toBody(): ProblemBody {
    return problemBody(this.code, this.message, this.extra);
  }

  /** The body as JSON, rendered on first use (a refusal answered many times is rendered once). */
  json(): string {
    return (this.rendered ??= JSON.stringify(this.toBody()));
  }

  /** The length in bytes of json(), counted once. */
  jsonBytes(): number {
    return (this.renderedBytes ??= Buffer.byteLength(this.json()));
  }
}

export function problemBody(
  code: ProblemCode,
  detail?: string,
  extra: Record<string, unknown> = {},
): ProblemBody {
  const p = PROBLEMS[code];
  const body: ProblemBody = { type: `urn:fencegate:${code}`, title: p.title, status: p.status };
  if (detail !== undefined) body.detail = detail;
  for (const [k, v] of Object.entries(extra)) {
    if (v === undefined) continue;
    body[k] = typeof v === 'bigint' ? v.toString(10) : v;
  }
  return body;
}

/** Raised by a store when the backend cannot be reached or failed: infrastructure, not a refusal. */
export class StoreUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreUnavailableError';
  }
}
