/**
 * The control listener: the issuer API, /healthz, /readyz, /metrics, the events API
 * (/v1/events, /v1/events/stream), the lock list (/v1/locks), /v1/status and the ops
 * dashboard (/dashboard).
 */
import Fastify from 'fastify';
import type { FastifyInstance } from 'fastify';
import { errorHandler, installProblemHandlers } from './http/problems.js';
import type { Issuer } from './issuer/service.js';
import issuerRoutes from './issuer/routes.js';
import dashboardRoutes from './dashboard/routes.js';
import type { BreakerBoard } from './observe/breakers.js';
import type { EventLog } from './observe/events.js';
import eventsRoutes from './observe/events-routes.js';
import locksRoutes from './observe/locks-routes.js';
import statusRoutes, { storeHealth, storeHealthJson } from './observe/status-routes.js';
import type { PolicyHolder } from './policy/index.js';
import type { Metrics } from './observe/metrics.js';
import type { Store } from './store/types.js';

export async function buildControl(opts: {
  store: Store;
  issuer: Issuer;
  metrics: Metrics;
  events: EventLog;
  defaultTtlMs: number;
  logLevel: string;
  /** The gateway's policy and breakers, for /v1/status (absent: no gateway in this process). */
  policy?: PolicyHolder;
  breakers?: BreakerBoard;
}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: { level: opts.logLevel },
    bodyLimit: 64 * 1024,
    routerOptions: { maxParamLength: 1024 },
    forceCloseConnections: true,
    return503OnClosing: true,
    frameworkErrors: (error, request, reply) => errorHandler(error, request, reply),
  });
  installProblemHandlers(app, 'not-found');
  await app.register(issuerRoutes, {
    issuer: opts.issuer,
    defaultTtlMs: opts.defaultTtlMs,
    events: opts.events,
  });
  await app.register(eventsRoutes, { events: opts.events });
  await app.register(locksRoutes, { store: opts.store });
  await app.register(statusRoutes, {
    store: opts.store,
    events: opts.events,
    policy: opts.policy ?? null,
    breakers: opts.breakers ?? null,
  });
  await app.register(dashboardRoutes);
  app.get('/healthz', async () => ({ ok: true }));
  app.get('/readyz', async (_req, reply) => {
    const h = await storeHealth(opts.store);
    return reply.code(h.ok ? 200 : 503).send({ ok: h.ok, store: storeHealthJson(h) });
  });
  app.get('/metrics', async (_req, reply) => {
    reply.type(opts.metrics.registry.contentType);
    return opts.metrics.registry.metrics();
  });
  return app;
}
