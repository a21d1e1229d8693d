/**
 * Forwarding with @fastify/http-proxy (reply-from over undici). One catch-all route;
 * the target comes from the route matched per request. Bodies are never parsed or
 * buffered: http-proxy's pass-through content parser hands the request stream to
 * undici as is. Request headers are cleaned before the gateway adds its own.
 */
import httpProxy from '@fastify/http-proxy';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { IncomingHttpHeaders } from 'node:http';
import { ProblemError } from '../errors.js';
import { HTTP_METHODS } from '../policy/index.js';
import type { GatewayRequestState } from './context.js';
import {
  FENCING_TOKEN,
  forwardingHeaders,
  stripRequestHeaders,
  stripResponseHeaders,
  type Headers,
} from './headers.js';
import { sendContinue } from './continue.js';
import { sessionLapsed } from './fence.js';
import { ForwardGuard, type ForwardCutError } from './forward-guard.js';
import type { Metrics } from '../observe/metrics.js';
import { sendProblem } from './problems.js';
import { upstreamProblem } from './upstream-errors.js';
import { attachScope, type ForwardScope, type UpstreamPool } from './upstreams.js';

export interface ForwardOptions {
  pool: UpstreamPool;
  trustProxy: boolean;
  metrics: Metrics;
}

/** The request headers the upstream receives. */
export function upstreamRequestHeaders(
  request: FastifyRequest,
  state: GatewayRequestState,
  headers: Headers,
  trustProxy: boolean,
): Headers {
  const fenced = state.match.route.lock !== null;
  const out = stripRequestHeaders(headers, request.headers.connection, fenced ? [FENCING_TOKEN] : []);
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

async function forward(app: FastifyInstance, opts: ForwardOptions): Promise<void> {
  const { pool, trustProxy, metrics } = opts;

  function handler(request: FastifyRequest, reply: FastifyReply): unknown {
    const state = request.fencegate;
    if (state === null) throw new Error('request reached the proxy without a route');
    const { route } = state.match;
    const { upstream } = route;
    const fence = state.fence;
    const entry = fence?.entry ?? null;
    // An admitted write whose entry is already finished (the client left first) must not
    // reach the upstream untracked: a higher token would no longer wait for it.
    if (entry?.finished) {
      throw new ProblemError('fence-unavailable', 'the client went away before the write was forwarded');
    }
    // Nor may one whose gateway session lapsed since it was admitted (its entry may no
    // longer count for other gateways).
    if (entry !== null && fence !== null && fence.token !== null && !entry.lease.valid) {
      entry.finish();
      throw sessionLapsed(fence.lock ?? '', fence.token);
    }
    const guard = new ForwardGuard(
      {
        upstream: upstream.name,
        timeoutMs: upstream.timeoutMs,
        idleTimeoutMs: route.upload.idleTimeoutMs,
        uploadTimeoutMs: route.upload.timeoutMs,
        lease: entry?.lease ?? null,
        lock: fence?.lock ?? null,
      },
      request.raw,
      metrics,
      (err: ForwardCutError) => {
        // Cut before undici started sending it: it never will, so its entry is done now.
        entry?.upstreamSettled();
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
      started: () => entry?.forwarding(),
      settled: () => {
        guard.settled();
        entry?.upstreamSettled();
      },
      clientGone: () => clientLeft,
    };
    return reply.from(upstream.basePath + state.path, {
      getUpstream: () => upstream.origin,
      rewriteRequestHeaders: (_req, headers) =>
        attachScope(
          upstreamRequestHeaders(request, state, headers as Headers, trustProxy),
          scope,
        ) as IncomingHttpHeaders,
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

  // No body is ever parsed: fastify's built-in text/plain parser would buffer (and cap) the
  // body before the preHandler runs. http-proxy adds pass-through parsers for the rest.
  app.removeAllContentTypeParsers();
  await app.register(httpProxy, {
    upstream: '',
    httpMethods: [...HTTP_METHODS],
    undici: pool.dispatcher as never,
    disableCache: true,
    disableRequestLogging: true,
    internalRewriteLocationHeader: false,
    retryMethods: [],
    replyOptions: { getUpstream: (request) => request.fencegate?.match.route.upstream.origin ?? '' },
    handler: (request, reply) => handler(request, reply),
  });
}

export const forwardPlugin = fp(forward, {
  name: 'fencegate-forward',
  fastify: '5.x',
  dependencies: ['fencegate-routing', 'fencegate-fence'],
});
