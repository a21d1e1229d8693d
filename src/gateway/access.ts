/**
 * What the data listener records of every answered request: fencegate_requests_total
 * {route,status_class} (one tally addition, resolved per route name), and a sampled
 * access log line at info.
 *
 * It is fastify's LogController (the `logController` option), whose requestCompleted
 * fastify calls once per response anyway: counting there adds no hook, no closure and
 * no promise per request. fastify's own two lines per request are replaced by this
 * one; with the access log off (or the level above info) no line is built at all.
 */
import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import { pathOf } from '../http/problems.js';
import { levelEnabled } from '../observe/log.js';
import type { Metrics } from '../observe/metrics.js';
import './context.js';

export class DataLogController extends LogController {
  constructor(
    private readonly metrics: Metrics,
    /** Share of requests logged, 0 (off) to 1 (every one). */
    private readonly sample: number,
  ) {
    super();
  }

  override incomingRequest(): void {}

  override requestCompleted(_error: unknown, request: FastifyRequest, reply: FastifyReply): void {
    const state = request.fencegate;
    const byClass =
      state === null || state === undefined
        ? this.metrics.noRoute
        : this.metrics.requestsOf(state.match.route.name);
    const tally = byClass[Math.floor(reply.statusCode / 100)];
    if (tally !== undefined) tally.n += 1;
    const sample = this.sample;
    if (sample > 0 && (sample >= 1 || Math.random() < sample)) logAccess(request, reply);
  }
}

function logAccess(request: FastifyRequest, reply: FastifyReply): void {
  const log = request.server.log;
  if (!levelEnabled(log, 'info')) return;
  const state = request.fencegate ?? null;
  const fence = state?.fence ?? null;
  log.info(
    {
      reqId: request.id,
      method: request.method,
      path: state?.path ?? pathOf(request.raw.url ?? '/'),
      route: state?.match.route.name ?? null,
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime * 1000) / 1000,
      client: request.ip,
      fence: fence?.mode ?? null,
      ...(fence !== null && fence.lock !== null ? { lock: fence.lock } : {}),
      ...(fence !== null && fence.token !== null ? { token: fence.token.toString(10) } : {}),
    },
    'request',
  );
}
