/**
 * Collects the three records of a fault run (grants, client operations, and at the end
 * the upstream's applied writes) and runs the history checker on them.
 */
import { expect } from 'vitest';
import {
  FencegateClient,
  FencegateError,
  LeaseLostError,
  LockHeldError,
  type Lock,
} from '../../../src/client/index.js';
import type { AppliedWrite } from '../../../src/sample/index.js';
import {
  appliedFromSample,
  checkHistory,
  formatViolation,
  type CheckOptions,
  type CheckResult,
  type ClientOperation,
  type GrantRecord,
} from '../../checker/index.js';

export interface WriteResult {
  status: number | 'error' | 'timeout';
  /** The problem type (`urn:fencegate:…`) when the gateway refused, else null. */
  problem: string | null;
  body: unknown;
  headers: Headers | null;
}

export interface WriteRequest {
  /** Gateway data listener base URL. */
  data: string;
  /** Path below it, e.g. /orders/7 (query allowed). */
  path: string;
  lock: string;
  /** The token to send; null sends none. */
  token: string | null;
  /** A Fencing-Sequencer to send as well (check: sequencer routes). */
  sequencer?: string;
  writer: string;
  requestId: string;
  body?: unknown;
  method?: string;
  timeoutMs?: number;
}

let counter = 0;
const RUN = `${process.pid.toString(36)}${Date.now().toString(36)}`;

/** A request id unique across runs and processes. */
export function opId(writer: string): string {
  return `${RUN}-${writer}-${++counter}`;
}

export class HistoryRecorder {
  readonly grants: GrantRecord[] = [];
  readonly operations: ClientOperation[] = [];

  recordGrant(g: GrantRecord): void {
    this.grants.push({ lock: g.lock, token: g.token, owner: g.owner, leaseId: g.leaseId });
  }

  recordOperation(op: ClientOperation): void {
    this.operations.push(op);
  }

  /**
   * Acquires through the client SDK (no auto-renew unless asked); records the grant.
   * Returns null when the lock stayed held, the grant came too late to be used, or the
   * issuer could not be reached.
   */
  async acquire(
    control: string,
    lock: string,
    owner: string,
    opts: { ttlMs: number; waitMs?: number; autoRenew?: boolean; requestTimeoutMs?: number },
  ): Promise<Lock | null> {
    const client = new FencegateClient({ url: control, requestTimeoutMs: opts.requestTimeoutMs ?? 10_000 });
    try {
      const l = await client.acquire(lock, {
        owner,
        ttlMs: opts.ttlMs,
        waitMs: opts.waitMs ?? 0,
        autoRenew: opts.autoRenew ?? false,
      });
      this.recordGrant({ lock, token: l.fencingToken, owner, leaseId: l.leaseId });
      return l;
    } catch (err) {
      if (err instanceof LockHeldError) return null;
      // The grant arrived too late to be used (a slow store under a short TTL): the SDK did
      // not hand it back, so no write can carry its token. Not an error of the run.
      if (err instanceof LeaseLostError) return null;
      // A refusal the issuer answered (4xx) is a bug of the run; no answer (NetworkError,
      // TimeoutError: status 0) or a 5xx is the issuer unreachable (e.g. killed): a grant
      // whose answer we never saw cannot be used.
      if (err instanceof FencegateError && err.status >= 400 && err.status < 500) throw err;
      return null;
    }
  }

  /**
   * One write through the gateway with X-Request-Id and X-Client-Id, recorded as a client
   * operation whatever happens: a status, 'timeout' (the client gave up) or 'error'.
   */
  async write(req: WriteRequest): Promise<WriteResult> {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'x-request-id': req.requestId,
      'x-client-id': req.writer,
    };
    if (req.token !== null) headers['fencing-token'] = req.token;
    if (req.sequencer !== undefined) headers['fencing-sequencer'] = req.sequencer;
    let result: WriteResult;
    try {
      const res = await fetch(`${req.data}${req.path}`, {
        method: req.method ?? 'PUT',
        headers,
        body: JSON.stringify(req.body ?? { by: req.writer, op: req.requestId }),
        signal: AbortSignal.timeout(req.timeoutMs ?? 20_000),
      });
      const text = await res.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        /* not JSON */
      }
      const type =
        body !== null && typeof body === 'object' && typeof (body as { type?: unknown }).type === 'string'
          ? (body as { type: string }).type
          : null;
      result = { status: res.status, problem: type, body, headers: res.headers };
    } catch (err) {
      const timedOut = err instanceof Error && (err.name === 'TimeoutError' || err.name === 'AbortError');
      result = { status: timedOut ? 'timeout' : 'error', problem: null, body: String(err), headers: null };
    }
    this.recordOperation({
      lock: req.lock,
      token: req.token,
      writer: req.writer,
      requestId: req.requestId,
      status: result.status,
      acknowledged: typeof result.status === 'number' && result.status >= 200 && result.status < 300,
    });
    return result;
  }

  /** Merges records another process reported (a child client's JSON lines). */
  merge(other: { grants: GrantRecord[]; operations: ClientOperation[] }): void {
    for (const g of other.grants) this.recordGrant(g);
    for (const o of other.operations) this.recordOperation(o);
  }
}

/** The upstream's applied-writes log (sample format). */
export async function fetchWrites(upstreamUrl: string): Promise<AppliedWrite[]> {
  const res = await fetch(`${upstreamUrl}/_writes`, { signal: AbortSignal.timeout(20_000) });
  if (res.status !== 200) throw new Error(`GET /_writes: HTTP ${res.status}`);
  return (await res.json()) as AppliedWrite[];
}

/**
 * Runs the checker on the run's records. The client record is complete (every write
 * sent through the gateway was recorded), so phantom writes are checked too.
 */
export async function checkRun(
  upstreamUrl: string,
  history: HistoryRecorder,
  options: CheckOptions & { only?: (w: AppliedWrite) => boolean } = {},
): Promise<{ result: CheckResult; writes: AppliedWrite[] }> {
  const { only, ...checkOptions } = options;
  const writes = (await fetchWrites(upstreamUrl)).filter((w) => only?.(w) ?? true);
  const result = checkHistory(
    { applied: appliedFromSample(writes), grants: history.grants, operations: history.operations },
    { clientRecordComplete: true, ...checkOptions },
  );
  return { result, writes };
}

/** Fails the test with the checker's explanation unless the history is clean. */
export async function expectHistoryOk(
  upstreamUrl: string,
  history: HistoryRecorder,
  options: CheckOptions & { only?: (w: AppliedWrite) => boolean } = {},
): Promise<CheckResult> {
  const { result } = await checkRun(upstreamUrl, history, options);
  expect(result.ok, formatViolation(result)).toBe(true);
  return result;
}
