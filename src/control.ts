/**
 * The control listener: the issuer API, /healthz, /readyz, /metrics and the
 * recent fenced-write events.
 */
import Fastify, { LogController } from 'fastify';
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  clientErrorProblem,
  errorHandler,
  HTTP_SERVER_OPTIONS,
  installProblemHandlers,
  missingHost,
  refuseUnknownExpectations,
  sendProblem,
} from './http/problems.js';
import type { Issuer } from './issuer/service.js';
import issuerRoutes from './issuer/routes.js';
import type { EventLog } from './observe/events.js';
import { levelEnabled } from './observe/log.js';
import type { Metrics } from './observe/metrics.js';
import type { Store } from './store/types.js';

export async function buildControl(opts: {
  store: Store;
  issuer: Issuer;
  metrics: Metrics;
  events: EventLog;
  defaultTtlMs: number;
  /** The process's root logger (lines get `listener: "control"`); or fastify's own at `logLevel`. */
  logger?: FastifyBaseLogger;
  logLevel?: string;
  /** Log a line per request at info (probes and /metrics at debug). Default true. */
  accessLog?: boolean;
}): Promise<FastifyInstance> {
  const loggerOption =
    opts.logger !== undefined
      ? { loggerInstance: opts.logger.child({ listener: 'control' }) }
      : { logger: { level: opts.logLevel ?? 'info', base: { listener: 'control' } } };
  const app = Fastify({
    ...loggerOption,
    // One access line per request (ControlLogController), not fastify's two at info.
    logController: new ControlLogController(opts.accessLog ?? true),
    bodyLimit: 64 * 1024,
    routerOptions: { maxParamLength: 1024 },
    forceCloseConnections: true,
    return503OnClosing: true,
    frameworkErrors: (error, request, reply) => errorHandler(error, request, reply),
    clientErrorHandler: clientErrorProblem,
    http: HTTP_SERVER_OPTIONS,
  });
  installProblemHandlers(app, 'not-found');
  refuseUnknownExpectations(app.server);
  app.addHook('onRequest', (request, reply, done) => {
    const noHost = missingHost(request);
    if (noHost === null) return done();
    reply.header('connection', 'close');
    sendProblem(reply, noHost);
  });
  await app.register(issuerRoutes, { issuer: opts.issuer, defaultTtlMs: opts.defaultTtlMs });
  app.get('/healthz', async () => ({ ok: true }));
  app.get('/readyz', async (_req, reply) => {
    const h = await opts.store.health().catch((err: unknown) => ({
      ok: false,
      kind: opts.store.kind,
      detail: err instanceof Error ? err.message : String(err),
      epoch: null,
    }));
    const body = {
      ok: h.ok,
      store: {
        kind: h.kind,
        ok: h.ok,
        detail: h.detail,
        epoch: h.epoch && { id: h.epoch.id, floor: h.epoch.floor.toString() },
      },
    };
    return reply.code(h.ok ? 200 : 503).send(body);
  });
  app.get('/metrics', async (_req, reply) => {
    reply.type(opts.metrics.registry.contentType);
    return opts.metrics.registry.metrics();
  });
  app.get('/v1/events', async () => ({ total: opts.events.total, events: opts.events.recent(200) }));
  return app;
}

/** Probes and scrapes: logged at debug, so they do not drown the info log. */
const QUIET_PATHS = new Set(['/healthz', '/readyz', '/metrics']);

/** The control listener's access log: a line per request, probes and scrapes at debug. */
class ControlLogController extends LogController {
  constructor(private readonly enabled: boolean) {
    super();
  }

  override incomingRequest(): void {}

  override requestCompleted(_error: unknown, request: FastifyRequest, reply: FastifyReply): void {
    if (this.enabled) logControlRequest(request, reply);
  }
}

function logControlRequest(request: FastifyRequest, reply: FastifyReply): void {
  const path = request.routeOptions.url ?? request.url.split('?', 1)[0] ?? '/';
  const level = QUIET_PATHS.has(path) && reply.statusCode < 500 ? 'debug' : 'info';
  if (!levelEnabled(request.log, level)) return;
  request.log[level](
    {
      method: request.method,
      path: request.url.split('?', 1)[0],
      route: request.routeOptions.url ?? null,
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime * 1000) / 1000,
      client: request.ip,
    },
    'request',
  );
}
