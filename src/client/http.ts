/** Minimal JSON-over-HTTP for the SDK, on the platform fetch (undici). */
import { FencegateError, type Problem } from './errors.js';

export type FetchLike = typeof fetch;

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
): Promise<{ ok: true; status: number; body: T } | { ok: false; status: number; problem: Problem | null }> {
  const signals = [AbortSignal.timeout(init.timeoutMs)];
  if (init.signal) signals.push(init.signal);
  const res = await fetchImpl(url, {
    method: init.method,
    headers: {
      ...init.headers,
      ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
    signal: AbortSignal.any(signals),
  });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = text.length > 0 ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (res.ok) {
    if (parsed === null)
      throw new FencegateError(`${init.method} ${url}: invalid JSON in response`, res.status, null);
    return { ok: true, status: res.status, body: parsed as T };
  }
  const problem =
    parsed !== null && typeof parsed === 'object' && 'type' in parsed ? (parsed as Problem) : null;
  return { ok: false, status: res.status, problem };
}

/** The headers that carry an API key: `Authorization: Bearer <key>` (none without a key). */
export function credentialHeaders(apiKey: string | undefined): Readonly<Record<string, string>> {
  return apiKey === undefined ? {} : Object.freeze({ authorization: `Bearer ${apiKey}` });
}

export function problemMessage(status: number, problem: Problem | null): string {
  if (!problem) return `HTTP ${status}`;
  return `${problem.title}${problem.detail ? `: ${problem.detail}` : ''} (${problem.type})`;
}
