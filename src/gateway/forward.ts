/**
 * Forwarding to an HTTP upstream with @fastify/reply-from over undici, for the kinds
 * that speak HTTP (http, s3). Bodies are never parsed or buffered: the pass-through
 * content parser (serve.ts) hands the request stream to undici as is. Request headers
 * are cleaned before the gateway adds its own.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { IncomingHttpHeaders } from 'node:http';
import { ProblemError } from '../errors.js';
import type { GatewayRequestState } from './context.js';
import {
  FENCING_SEQUENCER,
  FENCING_TOKEN,
  forwardingHeaders,
  stripRequestHeaders,
  stripResponseHeaders,
  type Headers,
} from './headers.js';
import { sendContinue } from '../http/continue.js';
import { sessionLapsed } from './session.js';
import { ForwardGuard, type ForwardCutError } from './forward-guard.js';
import type { KindEnvironment } from './kinds/types.js';
import { sendProblem } from '../http/problems.js';
import { upstreamProblem } from './upstream-errors.js';
import { attachScope, type ForwardScope } from './upstreams.js';

const FENCED_ROUTE_DROPS = [FENCING_TOKEN, FENCING_SEQUENCER];
const PLAIN_ROUTE_DROPS = [FENCING_SEQUENCER];

/** The request headers the upstream receives. */
export function upstreamRequestHeaders(
  request: FastifyRequest,
  state: GatewayRequestState,
  headers: Headers,
  trustProxy: boolean,
): Headers {
  const fenced = state.match.route.lock !== null;
  // The sequencer is a credential for its lease: no upstream ever sees it, fenced route or not.
  const out = stripRequestHeaders(
    headers,
    request.headers.connection,
    fenced ? FENCED_ROUTE_DROPS : PLAIN_ROUTE_DROPS,
    // Routed by the method an override header names: the upstream must see the same one.
    state.method !== request.method,
  );
  Object.assign(
    out,
    forwardingHeaders({
      peer: request.socket.remoteAddress ?? 'unknown',
      proto: request.protocol,
      host: request.headers.host,
      trustProxy,
      incomingXff: request.headers['x-forwarded-for'],
      incomingForwarded: request.headers.forwarded,
    }),
  );
  out['x-fencegate-request-id'] = request.id;
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
function sendCut(reply: FastifyReply, problem: ProblemError): FastifyReply {
  if (!reply.request.raw.complete) reply.header('connection', 'close');
  return sendProblem(reply, problem);
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
  request: FastifyRequest,
  reply: FastifyReply,
  state: GatewayRequestState,
  env: KindEnvironment,
  settings: ForwardSettings,
): unknown {
  const { pool, trustProxy, metrics } = env;
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
  const settled = () => {
    for (const e of entries) e.upstreamSettled();
  };
  const guard = new ForwardGuard(
    {
      upstream: upstream.name,
      timeoutMs: upstream.timeoutMs,
      idleTimeoutMs: route.upload.idleTimeoutMs,
      uploadTimeoutMs: route.upload.timeoutMs,
      lease,
      lock: fence?.lock ?? null,
    },
    request.raw,
    metrics,
    (err: ForwardCutError) => {
      // Cut before undici started sending it: it never will, so its entries are done now.
      settled();
      if (!reply.sent && !reply.raw.headersSent) sendCut(reply, err.problem);
      else reply.raw.destroy();
    },
  );
  let clientLeft = false;
  reply.raw.once('close', () => {
    clientLeft = !reply.raw.writableFinished;
    guard.clientClosed();
  });
  // Routed, fenced and past the drain barrier: only now may a client waiting on
  // `Expect: 100-continue` start its upload.
  sendContinue(request.raw, reply.raw);
  const scope: ForwardScope = {
    upstream,
    guard,
    started: () => {
      for (const e of entries) e.forwarding();
    },
    settled: () => {
      guard.settled();
      settled();
    },
    clientGone: () => clientLeft,
  };
  const asSent = settings.asSent === true;
  // The query goes on as received (reply-from appends the raw query of the request).
  const target = asSent ? state.path : upstream.basePath + state.path;
  return reply.from(target, {
    getUpstream: () => upstream.origin,
    rewriteRequestHeaders: (_req, headers) => {
      const out = upstreamRequestHeaders(request, state, headers as Headers, trustProxy);
      if (asSent && request.headers.host !== undefined) out.host = request.headers.host;
      return attachScope(out, scope) as IncomingHttpHeaders;
    },
    rewriteHeaders: (headers) => stripResponseHeaders(headers as Headers) as IncomingHttpHeaders,
    retryDelay: () => null,
    onError: (errReply, { error }) => {
      request.log.warn({ err: error, upstream: upstream.name }, 'upstream request failed');
      if (errReply.sent || reply.raw.destroyed) return;
      sendCut(
        errReply as FastifyReply,
        upstreamProblem(error, upstream.name, pool.retryAfterSeconds(upstream)),
      );
    },
  });
}
