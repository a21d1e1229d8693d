/**
 * The control listener: the issuer API, /healthz, /readyz, /metrics and the
 * recent fenced-write events.
 */
import Fastify from 'fastify';
import type { FastifyInstance } from 'fastify';
import { errorHandler, installProblemHandlers } from './http/problems.js';
import type { Issuer } from './issuer/service.js';
import issuerRoutes from './issuer/routes.js';
import type { EventLog } from './observe/events.js';
import type { Metrics } from './observe/metrics.js';
import type { SequencerIssuer } from './sequencer/index.js';
import keysRoutes from './sequencer/routes.js';
import type { Store } from './store/types.js';

export async function buildControl(opts: {
  store: Store;
  issuer: Issuer;
  metrics: Metrics;
  events: EventLog;
  defaultTtlMs: number;
  logLevel: string;
  /** Sequencer signing and the published keys (GET /v1/keys); null: sequencers off. */
  sequencers?: SequencerIssuer | null;
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
    sequencers: opts.sequencers,
  });
  await app.register(keysRoutes, { keys: opts.sequencers?.keys ?? null });
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
