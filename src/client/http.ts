/** Minimal JSON-over-HTTP for the SDK, on the platform fetch (undici). */
import {
  AbortedError,
  errorFor,
  FencegateError,
  NetworkError,
  TimeoutError,
  type Problem,
} from './errors.js';

export type FetchLike = typeof fetch;

export type CallResult<T> =
  | { ok: true; status: number; body: T }
  | { ok: false; status: number; problem: Problem | null; error: FencegateError };

/**
 * One call. A refusal is a result (with its typed `error`); what keeps an answer from
 * arriving is thrown, typed: TimeoutError after `timeoutMs`, AbortedError when `signal`
 * fired (cause: its reason), NetworkError otherwise (cause: the platform's error).
 */
export async function call<T>(
  fetchImpl: FetchLike,
  url: string,
  init: {
    method: string;
    body?: unknown;
    signal?: AbortSignal;
    timeoutMs: number;
    /** Sent with the request: the credential (Authorization), on control-listener calls only. */
    headers?: Readonly<Record<string, string>>;
  },
): Promise<CallResult<T>> {
  const timeout = AbortSignal.timeout(init.timeoutMs);
  const signal = init.signal ? AbortSignal.any([timeout, init.signal]) : timeout;
  const what = `${init.method} ${url}`;
  let res: Response;
  let text: string;
  try {
    res = await fetchImpl(url, {
      method: init.method,
      headers: {
        ...init.headers,
        ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      signal,
    });
    text = await res.text();
  } catch (err) {
    throw failure(what, err, init.signal, timeout, init.timeoutMs);
  }
  let parsed: unknown;
  try {
    parsed = text.length > 0 ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (res.ok) {
    if (parsed === null) throw new FencegateError(`${what}: invalid JSON in response`, res.status, null);
    return { ok: true, status: res.status, body: parsed as T };
  }
  const problem =
    parsed !== null && typeof parsed === 'object' && 'type' in parsed ? (parsed as Problem) : null;
  const error = errorFor(
    problemMessage(res.status, problem),
    res.status,
    problem,
    res.headers.get('retry-after'),
  );
  return { ok: false, status: res.status, problem, error };
}

/** What kept an answer from arriving, as a typed error. */
export function failure(
  what: string,
  err: unknown,
  caller: AbortSignal | undefined,
  timeout: AbortSignal | null,
  timeoutMs: number,
): FencegateError {
  if (err instanceof FencegateError) return err;
  if (caller?.aborted) {
    const reason: unknown = caller.reason;
    if (reason instanceof FencegateError) return reason;
    return new AbortedError(`${what}: aborted by the caller`, 0, null, { cause: reason });
  }
  if (timeout?.aborted)
    return new TimeoutError(`${what}: no answer within ${timeoutMs} ms`, 0, null, { cause: err });
  const detail = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
  return new NetworkError(`${what}: the server could not be reached${detail}`, 0, null, { cause: err });
}

/** The headers that carry an API key: `Authorization: Bearer <key>` (none without a key). */
export function credentialHeaders(apiKey: string | undefined): Readonly<Record<string, string>> {
  return apiKey === undefined ? {} : Object.freeze({ authorization: `Bearer ${apiKey}` });
}

export function problemMessage(status: number, problem: Problem | null): string {
  if (!problem) return `HTTP ${status}`;
  return `${problem.title}${problem.detail ? `: ${problem.detail}` : ''} (${problem.type})`;
}

/**
 * Waits `ms`, or less when `signal` fires first (then rejects with what `failure` makes of
 * its reason). Every wait of the SDK goes through here, so every one is interruptible.
 */
export function pause(ms: number, signal: AbortSignal | undefined, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(failure(what, null, signal, null, 0));
    const timer = setTimeout(done, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(failure(what, null, signal, null, 0));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    function done() {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }
  });
}

/** Full jitter: a random delay in [0, min(capMs, baseMs × 2^attempt)) (never 0 so it yields). */
export function backoffMs(attempt: number, baseMs = 50, capMs = 2000): number {
  return Math.max(1, Math.floor(Math.random() * Math.min(capMs, baseMs * 2 ** attempt)));
}
