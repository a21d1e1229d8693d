/**
 * The control listener: the issuer API, /healthz, /readyz, /metrics, the events API
 * (/v1/events, /v1/events/stream), the lock list (/v1/locks), /v1/status and the ops
 * dashboard (/dashboard); with an auth file, each route behind its rule
 * (src/auth/plugin.ts). And the probe listener (--health): /healthz, /readyz and
 * /metrics alone, never behind credentials.
 */
import type { Server as TlsServer } from 'node:tls';
import Fastify, { LogController } from 'fastify';
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  clientErrorProblem,
  errorHandler,
  HTTP_SERVER_OPTIONS,
  installProblemHandlers,
  missingHost,
  refuseTunnels,
  refuseUnknownExpectations,
  sendProblem,
} from '../http/problems.js';
import { checkHost, type HostAllowList } from '../http/allowed-hosts.js';
import { clientRequestId, newRequestId } from '../http/request-id.js';
import { httpsOption, type ListenerTls } from '../http/tls.js';
import type { Authenticator } from '../auth/authenticate.js';
import authPlugin from '../auth/plugin.js';
import type { Issuer } from '../issuer/service.js';
import issuerRoutes from './issuer-routes.js';
import dashboardRoutes from './dashboard/routes.js';
import type { BreakerBoard } from '../breakers/board.js';
import type { EventLog } from '../observe/events.js';
import { levelEnabled } from '../observe/log.js';
import eventsRoutes from './events-routes.js';
import locksRoutes from './locks-routes.js';
import openapiRoute from './openapi-route.js';
import statusRoutes, { storeHealth, storeHealthJson } from './status-routes.js';
import type { PolicyHolder } from '../policy/index.js';
import type { Metrics } from '../observe/metrics.js';
import type { SequencerIssuer } from '../sequencer/index.js';
import keysRoutes from './sequencer-routes.js';
import type { Store } from '../store/types.js';

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
  /** The gateway's policy and breakers, for /v1/status (absent: no gateway in this process). */
  policy?: PolicyHolder;
  breakers?: BreakerBoard;
  /** Sequencer signing and the published keys (GET /v1/keys); null: sequencers off. */
  sequencers?: SequencerIssuer | null;
  /** TLS (and mTLS) for the listener; null or absent: plain HTTP. */
  tls?: ListenerTls | null;
  /** The principals of the auth file; null or absent: no authentication (loopback or --insecure). */
  auth?: Authenticator | null;
  /** What GET /metrics answers; default: `metrics.registry`. With --workers: every process's, merged. */
  scrape?: () => Promise<string>;
  /** With --workers: how many workers serve the data listener now (/readyz fails with none). */
  workers?: () => { ready: number; configured: number };
  /** The Host names answered (src/http/allowed-hosts.ts); null or absent: any. */
  allowedHosts?: HostAllowList | null;
  /** Open connections taken at most (--control-max-connections); absent: no cap. */
  maxConnections?: number;
  /** Event streams open at once at most, and per principal (with an auth file). */
  eventStreams?: { max: number; perPrincipal: number };
}): Promise<FastifyInstance> {
  const app = baseApp('control', opts);
  // Before authentication: a page reached by DNS rebinding gets no KDF run and no answer.
  const allowed = opts.allowedHosts ?? null;
  if (allowed !== null) {
    app.addHook('onRequest', (request, reply, done) => {
      const refusal = checkHost(allowed, request.raw);
      if (refusal === null) return done();
      sendProblem(reply, refusal);
    });
  }
  // Beyond the cap node:http closes new connections at once, before they are read.
  if (opts.maxConnections !== undefined) app.server.maxConnections = opts.maxConnections;
  if (opts.auth) await app.register(authPlugin, { authenticator: opts.auth, metrics: opts.metrics });
  await app.register(issuerRoutes, {
    issuer: opts.issuer,
    defaultTtlMs: opts.defaultTtlMs,
    events: opts.events,
    sequencers: opts.sequencers,
  });
  await app.register(keysRoutes, { keys: opts.sequencers?.keys ?? null });
  await app.register(eventsRoutes, {
    events: opts.events,
    ...(opts.eventStreams === undefined
      ? {}
      : { maxStreams: opts.eventStreams.max, maxStreamsPerPrincipal: opts.eventStreams.perPrincipal }),
  });
  await app.register(locksRoutes, { store: opts.store });
  await app.register(statusRoutes, {
    store: opts.store,
    events: opts.events,
    policy: opts.policy ?? null,
    breakers: opts.breakers ?? null,
    ...(opts.workers ? { workers: opts.workers } : {}),
  });
  await app.register(dashboardRoutes);
  await app.register(openapiRoute);
  probeRoutes(app, opts);
  return app;
}

/** The probe listener (--health): /healthz, /readyz and /metrics, without credentials. */
export async function buildProbes(
  opts: ProbeOptions & { logger?: FastifyBaseLogger; logLevel?: string; accessLog?: boolean },
): Promise<FastifyInstance> {
  const app = baseApp('health', opts);
  probeRoutes(app, opts);
  return app;
}

/** What /healthz, /readyz and /metrics need, on the control listener and the probe listener alike. */
interface ProbeOptions {
  store: Store;
  metrics: Metrics;
  /** What GET /metrics answers; default: `metrics.registry`. With --workers: every process's, merged. */
  scrape?: () => Promise<string>;
  /** With --workers: how many workers serve the data listener now (/readyz fails with none). */
  workers?: () => { ready: number; configured: number };
}

function probeRoutes(app: FastifyInstance, opts: ProbeOptions): void {
  app.get('/healthz', async () => ({ ok: true }));
  app.get('/readyz', async (_req, reply) => {
    const h = await storeHealth(opts.store);
    const workers = opts.workers?.();
    const ok = h.ok && (workers === undefined || workers.ready > 0);
    return reply
      .code(ok ? 200 : 503)
      .send({ ok, store: storeHealthJson(h), ...(workers === undefined ? {} : { workers }) });
  });
  const scrape = opts.scrape ?? (() => opts.metrics.registry.metrics());
  app.get('/metrics', async (_req, reply) => {
    reply.type(opts.metrics.registry.contentType);
    return scrape();
  });
}

/** A fastify app with the control listener's logging, limits and problem answers. */
function baseApp(
  listener: 'control' | 'health',
  opts: { logger?: FastifyBaseLogger; logLevel?: string; accessLog?: boolean; tls?: ListenerTls | null },
): FastifyInstance {
  const loggerOption =
    opts.logger !== undefined
      ? { loggerInstance: opts.logger.child({ listener }) }
      : { logger: { level: opts.logLevel ?? 'info', base: { listener } } };
  const app = Fastify({
    ...loggerOption,
    // One access line per request (ControlLogController), not fastify's two at info.
    logController: new ControlLogController(opts.accessLog ?? true),
    bodyLimit: 64 * 1024,
    // The same scheme as the data listener's (src/http/request-id.ts), not fastify's req-1, req-2.
    genReqId: newRequestId,
    routerOptions: { maxParamLength: 1024 },
    forceCloseConnections: true,
    return503OnClosing: true,
    frameworkErrors: (error, request, reply) => errorHandler(error, request, reply),
    clientErrorHandler: clientErrorProblem,
    http: HTTP_SERVER_OPTIONS,
    ...httpsOption(opts.tls),
  });
  opts.tls?.attach(app.server as unknown as TlsServer, app.log);
  installProblemHandlers(app, 'not-found');
  // The control API reads JSON bodies only: fastify's text/plain parser would hand a
  // text body to the routes, to be refused as a malformed body (400) rather than as a
  // media type it does not read (415 unsupported-media-type, like any other type).
  app.removeContentTypeParser('text/plain');
  refuseUnknownExpectations(app.server);
  refuseTunnels(app.server);
  app.addHook('onRequest', (request, reply, done) => {
    const noHost = missingHost(request.raw);
    if (noHost === null) return done();
    reply.header('connection', 'close');
    sendProblem(reply, noHost);
  });
  return app;
}

/**
 * Probes: logged at debug whatever they answer (a /readyz 503 while workers start or the
 * store is down is what the probe is for, not news; the lifecycle lines say why).
 * Scrapes and the dashboard's status poll: at debug unless they fail (5xx).
 */
const PROBE_PATHS = new Set(['/healthz', '/readyz']);
const QUIET_PATHS = new Set(['/metrics', '/v1/status', '/v1/upstreams']);

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
  const quiet = PROBE_PATHS.has(path) || (QUIET_PATHS.has(path) && reply.statusCode < 500);
  const level = quiet ? 'debug' : 'info';
  if (!levelEnabled(request.log, level)) return;
  request.log[level](
    {
      method: request.method,
      path: request.url.split('?', 1)[0],
      route: request.routeOptions.url ?? null,
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime * 1000) / 1000,
      client: request.ip,
      clientReqId: clientRequestId(request.headers),
    },
    'request',
  );
}
