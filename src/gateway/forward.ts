/**
 * Forwarding to an HTTP upstream over undici, for the kinds that speak HTTP (http, s3).
 * Bodies are never parsed or buffered: the request stream goes to undici as is, and the
 * answer is written to the client's socket as undici delivers it (HttpForward),
 * without a response stream in between. Request headers are cleaned before the gateway
 * adds its own.
 */
import { ProblemError } from '../errors.js';
import type { GatewayRequestState } from './context.js';
import type { AnswerTap, Exchange } from './exchange.js';
import type { InflightEntry } from './inflight.js';
import {
  FENCING_SEQUENCER,
  FENCING_TOKEN,
  forwardingHeaders,
  headersFromRaw,
  stripRequestHeaders,
  stripResponseHeaders,
  type Headers,
} from './headers.js';
import { sendContinue } from '../http/continue.js';
import { sessionLapsed } from './session.js';
import { ForwardGuard, type ForwardCutError, type GuardSettings } from './forward-guard.js';
import type { Metrics } from '../observe/metrics.js';
import type { KindEnvironment } from './kinds/types.js';
import { upstreamProblem } from './upstream-errors.js';
import type { ForwardScope, UpstreamPool, UpstreamSink } from './upstreams.js';
import type { CompiledUpstream } from '../policy/index.js';

const FENCED_ROUTE_DROPS = [FENCING_TOKEN, FENCING_SEQUENCER];
const PLAIN_ROUTE_DROPS = [FENCING_SEQUENCER];

/** The request headers the upstream receives. */
export function upstreamRequestHeaders(ex: Exchange, state: GatewayRequestState): Headers {
  const headers = ex.headers as Headers;
  const fenced = state.match.route.lock !== null;
  // The sequencer is a credential for its lease: no upstream ever sees it, fenced route or not.
  const out = stripRequestHeaders(
    headers,
    headers.connection,
    fenced ? FENCED_ROUTE_DROPS : PLAIN_ROUTE_DROPS,
    // Routed by the method an override header names: the upstream must see the same one.
    state.method !== ex.method,
  );
  Object.assign(
    out,
    forwardingHeaders({
      peer: ex.peer,
      proto: ex.protocol,
      host: headers.host as string | undefined,
      trustProxy: ex.trustProxy,
      incomingXff: headers['x-forwarded-for'],
      incomingForwarded: headers.forwarded,
    }),
  );
  out['x-fencegate-request-id'] = ex.id;
  out['x-fencegate-route'] = state.match.route.name;
  const fence = state.fence;
  if (fence !== null) {
    out['x-fencegate-fence'] = fence.mode;
    // The lock that fenced this write, URL-encoded (keys are UTF-8, header values are not).
    // Absent when the lock could not be rendered (shadow mode, invalid key: lock is '').
    if (fence.lock !== null && fence.lock !== '') out['x-fencegate-lock'] = encodeURIComponent(fence.lock);
    if (fence.token !== null) out[FENCING_TOKEN] = fence.token.toString(10);
  }
  return out;
}

/**
 * A forward that failed or was cut: the problem, on a connection that is closed after
 * it when the client's body was not read to the end (what is left of it is not
 * worth reading, and may never come).
 */
function sendCut(ex: Exchange, problem: ProblemError): void {
  if (!ex.req.complete) ex.header('connection', 'close');
  ex.answerProblem(problem);
}

/** How a kind wants a request forwarded (the http kind: the defaults). */
export interface ForwardSettings {
  /**
   * Keep the request line's path and query exactly as received and the client's Host
   * header (a signed request must reach its upstream as signed). Default: the upstream's
   * base path + the routed path, and the upstream's host.
   */
  asSent?: boolean;
}

/**
 * Forwards a routed request (admitted, when fenced) to its HTTP upstream through the
 * shared pool: the forward guard bounds it and refuses to send it once its gateway
 * session lapsed; its in-flight entries finish when the upstream settles.
 */
export function forwardHttp(
  ex: Exchange,
  state: GatewayRequestState,
  env: KindEnvironment,
  settings: ForwardSettings,
): void {
  const { pool, metrics } = env;
  const { route } = state.match;
  const { upstream } = route;
  const fence = state.fence;
  const entries = fence?.entries ?? [];
  const lease = entries[0]?.lease ?? null;
  // An admitted write whose entry is already finished (the client left first) must not
  // reach the upstream untracked: a higher token would no longer wait for it.
  if (entries.some((e) => e.finished)) {
    for (const e of entries) e.finish();
    throw new ProblemError('fence-unavailable', 'the client went away before the write was forwarded');
  }
  // Nor may one whose gateway session lapsed since it was admitted (its entries may no
  // longer count for other gateways).
  if (lease !== null && fence !== null && fence.token !== null && !lease.valid) {
    for (const e of entries) e.finish();
    throw sessionLapsed(fence.lock);
  }
  const guarding: GuardSettings = {
    upstream: upstream.name,
    timeoutMs: upstream.timeoutMs,
    idleTimeoutMs: route.upload.idleTimeoutMs,
    uploadTimeoutMs: route.upload.timeoutMs,
    lease,
    lock: fence?.lock ?? null,
  };
  const forward = new HttpForward(ex, upstream, pool, entries, guarding, metrics);
  ex.res.once('close', () => forward.clientClosed());
  // Routed, fenced and past the drain barrier: only now may a client waiting on
  // `Expect: 100-continue` start its upload.
  sendContinue(ex.req, ex.res);
  const asSent = settings.asSent === true;
  // The path as routed (and fenced), the query as received.
  const url = ex.req.url ?? '/';
  const q = url.indexOf('?');
  const path = (asSent ? state.path : upstream.basePath + state.path) + (q < 0 ? '' : url.slice(q));
  // Stripping makes a new object: the Host header is set on it, after (a `Connection: host`
  // from the client cannot take it away).
  const headers = upstreamRequestHeaders(ex, state);
  const clientHost = ex.headers.host;
  headers.host = asSent && clientHost !== undefined ? clientHost : hostOf(upstream);
  ex.tap?.forwarding();
  pool.forward(
    forward,
    { method: ex.method, path, headers: headers as Record<string, string | string[]>, body: ex.body },
    forward,
  );
}

/** host[:port] of the upstream's origin (the Host header it gets), once per compiled upstream. */
const hosts = new WeakMap<CompiledUpstream, string>();
function hostOf(upstream: CompiledUpstream): string {
  let host = hosts.get(upstream);
  if (host === undefined) {
    host = new URL(upstream.origin).host;
    hosts.set(upstream, host);
  }
  return host;
}

/**
 * One forward, in one object: what the pool asks of its scope (the guard; the request
 * started, settled, its client gone) and where the answer goes. The answer is passed to
 * the client as it arrives: the status and cleaned headers, then the body chunks with
 * undici's own flow control (a full socket pauses the upstream connection until it
 * drains). No answer: a problem.
 */
class HttpForward implements ForwardScope, UpstreamSink {
  readonly guard: ForwardGuard;
  /** Keeps the answer for an idempotency key: read whole even when the client is gone. */
  private readonly tap: AnswerTap | null;
  private clientLeft = false;
  private abort: ((err?: Error) => void) | null = null;
  private resume: (() => void) | null = null;
  private drained: (() => void) | null = null;

  constructor(
    private readonly ex: Exchange,
    readonly upstream: CompiledUpstream,
    private readonly pool: UpstreamPool,
    /** The request's in-flight entries (none when not fenced in the gateway). */
    private readonly entries: readonly InflightEntry[],
    guarding: GuardSettings,
    metrics: Metrics,
  ) {
    this.guard = new ForwardGuard(guarding, ex.req, metrics, (err) => this.cutUnsent(err));
    this.tap = ex.tap;
  }

  started(): void {
    for (const e of this.entries) e.forwarding();
  }

  settled(): void {
    this.guard.settled();
    // No answer after the upstream may have had the whole request: it may still apply it,
    // so its entries count on for their lock-delay (inflight.ts, lock-delay.ts).
    const sentAt = this.guard.unansweredSince();
    if (sentAt === null) for (const e of this.entries) e.upstreamSettled();
    else for (const e of this.entries) e.unanswered(sentAt);
  }

  clientGone(): boolean {
    return this.clientLeft;
  }

  /** Cut before undici started sending it: it never will, so its entries are done now. */
  cutUnsent(err: ForwardCutError): void {
    for (const e of this.entries) e.upstreamSettled();
    this.tap?.failed();
    if (!this.ex.sent) sendCut(this.ex, err.problem);
    else this.ex.res.destroy();
  }

  /**
   * The client's connection closed. Before its answer was written whole: once the answer
   * is streaming, the rest of it is not read. Before that the request goes on: the
   * upstream may apply it whether or not anyone hears the answer, and its in-flight
   * entry must count until it settles. An answer kept for an idempotency key is read on
   * to its end (the retry gets it), no longer passed on.
   */
  clientClosed(): void {
    this.clientLeft = !this.ex.res.writableFinished;
    this.guard.clientClosed();
    if (!this.clientLeft || this.resume === null) return;
    if (this.tap === null) this.abort?.(new ClientGoneError());
    else this.resume();
  }

  onStart(abort: (err?: Error) => void): void {
    this.abort = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    const res = this.ex.res;
    const headers = stripResponseHeaders(headersFromRaw(rawHeaders));
    this.tap?.head(statusCode, headers);
    if (this.tap !== null && (res.destroyed || this.clientLeft)) {
      // Nobody to pass it to, but the retry will want it: read on.
      this.clientLeft = true;
      this.resume = resume;
      return true;
    }
    if (res.destroyed || this.clientLeft) {
      // The client went away while the upstream worked: nothing to pass the answer to.
      this.abort?.(new ClientGoneError());
      return false;
    }
    // An HTTP/1 connection cannot take its next request until this one's body was read.
    if (!this.ex.req.complete) headers.connection = 'close';
    try {
      res.writeHead(statusCode, headers as Record<string, string | string[]>);
    } catch (err) {
      this.ex.log.warn({ err, upstream: this.upstream.name }, 'upstream answer cannot be passed on');
      res.destroy();
      this.abort?.(new ClientGoneError());
      return false;
    }
    this.resume = resume;
    return true;
  }

  onData(chunk: Buffer): boolean {
    this.tap?.data(chunk);
    if (this.clientLeft) return true;
    const res = this.ex.res;
    if (res.write(chunk)) return true;
    res.once('drain', (this.drained ??= () => this.resume?.()));
    return false;
  }

  onComplete(): void {
    this.tap?.complete();
    if (!this.clientLeft) this.ex.res.end();
  }

  /** The answer broke off after its headers: the client's response is cut too. */
  onError(err: Error): void {
    this.tap?.failed();
    if (!(err instanceof ClientGoneError)) {
      this.ex.log.warn({ err, upstream: this.upstream.name }, 'upstream answer broke off');
    }
    this.ex.res.destroy();
  }

  failed(err: Error): void {
    this.tap?.failed();
    const { ex, upstream } = this;
    if (!(err instanceof ClientGoneError)) {
      ex.log.warn({ err, upstream: upstream.name }, 'upstream request failed');
    }
    if (ex.sent || ex.res.destroyed) return;
    sendCut(ex, upstreamProblem(err, upstream.name, this.pool.retryAfterSeconds(upstream)));
  }
}

/** Aborts an upstream request whose client is gone (not the upstream's failure). */
class ClientGoneError extends Error {
  readonly code = 'FG_CLIENT_GONE';
  constructor() {
    super('the client went away before the answer could be passed on');
    this.name = 'ClientGoneError';
  }
}
