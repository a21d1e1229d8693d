/**
 * What the data listener records of every answered request: fencegate_requests_total
 * {route,status_class} (one tally addition, resolved per route name), and a sampled
 * access log line at info. With the access log off (or the level above info) no line,
 * and no logger for the request, is built at all.
 */
import type { FastifyBaseLogger } from 'fastify';
import { pathOf } from '../http/problems.js';
import { levelEnabled } from '../observe/log.js';
import type { Metrics } from '../observe/metrics.js';
import { clientRequestId } from '../http/request-id.js';
import type { Exchange } from './exchange.js';

export class AccessRecorder {
  constructor(
    private readonly metrics: Metrics,
    /** Share of requests logged, 0 (off) to 1 (every one). */
    private readonly sample: number,
    /** The listener's logger: its level is checked before a request's own logger is made. */
    private readonly log: FastifyBaseLogger,
  ) {}

  /** `ex` was answered whole (its response finished). */
  answered(ex: Exchange): void {
    const state = ex.state;
    const byClass = state === null ? this.metrics.noRoute : this.metrics.requestsOf(state.match.route.name);
    const tally = byClass[Math.floor(ex.res.statusCode / 100)];
    if (tally !== undefined) tally.n += 1;
    const sample = this.sample;
    if (sample <= 0 || !levelEnabled(this.log, 'info')) return;
    if (sample >= 1 || Math.random() < sample) logAccess(ex);
  }
}

function logAccess(ex: Exchange): void {
  const state = ex.state;
  const fence = state?.fence ?? null;
  ex.log.info(
    {
      method: ex.method,
      path: state?.path ?? pathOf(ex.req.url ?? '/'),
      route: state?.match.route.name ?? null,
      status: ex.res.statusCode,
      ms: Math.round((performance.now() - ex.arrived) * 1000) / 1000,
      client: ex.ip,
      clientReqId: clientRequestId(ex.headers),
      fence: fence?.mode ?? null,
      ...(fence !== null && fence.lock !== null ? { lock: fence.lock } : {}),
      ...(fence !== null && fence.token !== null ? { token: fence.token.toString(10) } : {}),
    },
    'request',
  );
}
