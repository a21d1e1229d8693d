/**
 * The data plane: every request on the data listener is routed (routing.ts), fenced
 * when its route is (fence.ts), and served by its upstream's kind (runtimes.ts), on
 * node:http's request and response directly. fastify hosts the listener (TLS, client
 * errors, logging, the close sequence) but no data request passes through its router,
 * hooks, request and reply objects or send path: a profile put that layer at 17–27 µs
 * of the gateway's CPU per request (docs/adr/0015-data-plane-on-node-http.md).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { HTTP_METHODS, type PolicyHolder } from '../policy/index.js';
import { installProblemHandlers, problemFor } from '../http/problems.js';
import type { AccessRecorder } from './access.js';
import type { GatewayRequestState } from './context.js';
import { Exchange } from './exchange.js';
import type { FenceStep } from './fence.js';
import type { Idempotency } from './idempotency.js';
import { routeRequest } from './routing.js';
import { installRefusalLane } from '../http/lane.js';
import type { KindRuntimes } from './runtimes.js';

export interface DataPlaneParts {
  policy: PolicyHolder;
  fence: FenceStep;
  /** Idempotency keys: replays and refusals before the fence, answers kept after it. */
  idempotency: Idempotency;
  runtimes: KindRuntimes;
  access: AccessRecorder;
  log: FastifyBaseLogger;
  /** Trust X-Forwarded-* from the peer (the gateway runs behind a load balancer). */
  trustProxy: boolean;
}

export class DataPlane {
  constructor(private readonly parts: DataPlaneParts) {}

  /** Serves one request; every outcome, error included, is answered on `res`. */
  handle(req: IncomingMessage, res: ServerResponse): void {
    const { parts } = this;
    const ex = new Exchange(req, res, parts.log, parts.trustProxy);
    // `on`, not `once`: a response finishes once, and `once` wraps each request's listener.
    res.on('finish', () => parts.access.answered(ex));
    try {
      const pending = this.run(ex);
      if (pending !== undefined) pending.catch((err: unknown) => this.failed(ex, err));
    } catch (err) {
      this.failed(ex, err);
    }
  }

  /**
   * Answers now a request whose answer needs no waiting: refused by routing, or by the
   * fence from its headers alone (a stale flood's writes). True when it was answered and
   * counted; false when it would wait or go upstream, and nothing was done: `handle`
   * serves it then, from the start (the refusal lane, src/http/lane.ts).
   */
  answerNow(req: IncomingMessage, res: ServerResponse): boolean {
    const { parts } = this;
    const ex = new Exchange(req, res, parts.log, parts.trustProxy);
    try {
      if (!this.refusedNow(ex)) return false;
    } catch (err) {
      this.failed(ex, err);
    }
    if (ex.sent) parts.access.answered(ex);
    return true;
  }

  private refusedNow(ex: Exchange): boolean {
    const { parts } = this;
    const state = routeRequest(ex, parts.policy.current);
    if (state === null) return true;
    const fencing = state.match.route.fencing;
    if (fencing === null) return false;
    // A key is judged before the fence (a replay is not refused as stale): not here.
    if (parts.idempotency.applies(ex, state.match.route) !== null) return false;
    ex.state = state;
    return parts.fence.refuseNow(ex, state, fencing);
  }

  private run(ex: Exchange): void | Promise<void> {
    const { parts } = this;
    const state = routeRequest(ex, parts.policy.current);
    if (state === null) return;
    ex.state = state;
    const settings = parts.idempotency.applies(ex, state.match.route);
    if (settings !== null) return parts.idempotency.serve(ex, state, settings, () => this.proceed(ex, state));
    return this.proceed(ex, state);
  }

  /** A routed request: fenced when its route is, then served by its upstream's kind. */
  private proceed(ex: Exchange, state: GatewayRequestState): void | Promise<void> {
    const { parts } = this;
    const fencing = state.match.route.fencing;
    // An unfenced route passes without a promise or a microtask.
    if (fencing === null) return parts.runtimes.serve(ex);
    // A write refused without waiting (a stale flood's) is answered with no promise either.
    const fenced = parts.fence.step(ex, state, fencing);
    if (typeof fenced === 'boolean') return fenced ? undefined : parts.runtimes.serve(ex);
    return fenced.then((refused) => {
      if (!refused) return parts.runtimes.serve(ex);
    });
  }

  /**
   * A step threw: a problem, or (the answer already started, or the problem cannot be
   * written) the response is cut. Never throws: it runs where nothing else would catch.
   */
  private failed(ex: Exchange, err: unknown): void {
    const error = err instanceof Error ? err : new Error(String(err));
    try {
      if (!ex.sent) {
        ex.answerProblem(problemFor(error, ex));
        return;
      }
      ex.log.error({ err: error }, 'error after the answer started');
    } catch (cause) {
      ex.log.error({ err: error, cause }, 'error that could not be answered');
    }
    if (!ex.res.writableFinished) ex.res.destroy();
  }
}

/**
 * Puts `plane` in front of `app`'s own request handling, and (`lane`) the refusal lane in
 * front of node:http's reading of each connection. While the app closes, requests
 * go to fastify, which answers 503 with `Connection: close` (return503OnClosing). A
 * catch-all route hands fastify's own requests (inject(), and the extra servers fastify
 * makes when listening on a name with several addresses) to the plane as well.
 */
export function installDataPlane(app: FastifyInstance, plane: DataPlane, opts: { lane: boolean }): void {
  const server = app.server;
  const viaFastify = server.listeners('request') as ((req: IncomingMessage, res: ServerResponse) => void)[];
  server.removeAllListeners('request');
  const lane = opts.lane ? installRefusalLane(server, (req, res) => plane.answerNow(req, res)) : null;
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    lane?.close();
    done();
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (!closing) plane.handle(req, res);
    else for (const listener of viaFastify) listener.call(server, req, res);
  });

  installProblemHandlers(app, 'no-route');
  // No body is ever parsed: every content type passes through as the stream.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
  const handler = (request: { raw: IncomingMessage }, reply: { hijack(): void; raw: ServerResponse }) => {
    reply.hijack();
    plane.handle(request.raw, reply.raw);
  };
  for (const url of ['/', '/*']) app.route({ url, method: [...HTTP_METHODS], handler });
}
