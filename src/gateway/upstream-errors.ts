/**
 * Classifying upstream failures into problems. Timeouts waiting for the answer are
 * 504 upstream-timeout; everything else (refused, reset, unreachable, DNS, the
 * upstream's circuit open) is 502 upstream-unavailable. Errors are classified by
 * `code`, walking the `cause` chain (a wrapped error keeps its cause), never by
 * message text.
 */
import { ProblemError } from '../errors.js';
import { ForwardCutError } from './forward-guard.js';

const TIMEOUT_CODES = new Set([
  'FG_UPSTREAM_LATE',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'ETIMEDOUT',
  'FST_REPLY_FROM_TIMEOUT',
]);

/** Codes that say the upstream (not the client) failed; only these count against its circuit breaker. */
const UPSTREAM_FAILURE_CODES = new Set([
  ...TIMEOUT_CODES,
  'ECONNREFUSED',
  'ECONNRESET',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_CLOSED',
]);

export const CIRCUIT_OPEN = 'EOPENBREAKER';

/** The codes along an error's cause chain, outermost first. */
export function errorCodes(err: unknown): string[] {
  const codes: string[] = [];
  let current: unknown = err;
  for (let depth = 0; depth < 8 && current !== null && typeof current === 'object'; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') codes.push(code);
    current = (current as { cause?: unknown }).cause;
  }
  return codes;
}

export function isUpstreamFailure(err: unknown): boolean {
  return errorCodes(err).some((c) => UPSTREAM_FAILURE_CODES.has(c));
}

/** The gateway's own cut of a request (forward-guard.ts) along the cause chain, if any. */
function forwardCut(err: unknown): ForwardCutError | null {
  let current: unknown = err;
  for (let depth = 0; depth < 8 && current !== null && typeof current === 'object'; depth++) {
    if (current instanceof ForwardCutError) return current;
    current = (current as { cause?: unknown }).cause;
  }
  return null;
}

export function upstreamProblem(err: unknown, upstream: string, retryAfterSeconds: number): ProblemError {
  const cut = forwardCut(err);
  if (cut !== null) return cut.problem;
  const codes = errorCodes(err);
  if (codes.includes(CIRCUIT_OPEN)) {
    return new ProblemError(
      'upstream-unavailable',
      `upstream "${upstream}" is failing; its circuit breaker is open`,
      { upstream },
      { cause: err, headers: { 'retry-after': String(retryAfterSeconds) } },
    );
  }
  if (codes.some((c) => TIMEOUT_CODES.has(c))) {
    return new ProblemError(
      'upstream-timeout',
      `upstream "${upstream}" did not answer in time; it may still apply the request`,
      { upstream },
      { cause: err },
    );
  }
  const code = codes.find((c) => UPSTREAM_FAILURE_CODES.has(c)) ?? codes.at(-1) ?? 'error';
  return new ProblemError(
    'upstream-unavailable',
    `upstream "${upstream}" could not be reached (${code})`,
    { upstream },
    { cause: err },
  );
}
