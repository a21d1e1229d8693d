/**
 * GET /v1/status: what the dashboard's health panel shows, in one small JSON: the
 * store's health (as /readyz judges it) and its circuit breaker, each upstream with its
 * kind and breaker state, the routes in force, and the event counters. docs/events.md.
 * GET /v1/upstreams: each upstream's breaker beside what it answered over the last five
 * minutes (requests, errors, latency, the last error): the dashboard's upstream panel.
 */
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { PolicyHolder } from '../policy/index.js';
import type { Store, StoreHealth } from '../store/types.js';
import type { BreakerBoard } from '../breakers/board.js';
import { WINDOW_MS } from '../breakers/upstream-stats.js';
import { VERSION } from '../version.js';
import type { EventLog } from '../observe/events.js';

/** The store's health; a store that throws is reported unhealthy, never as an error. */
export async function storeHealth(store: Store): Promise<StoreHealth> {
  return store.health().catch((err: unknown) => ({
    ok: false,
    kind: store.kind,
    detail: err instanceof Error ? err.message : String(err),
    epoch: null,
  }));
}

export function storeHealthJson(h: StoreHealth) {
  return {
    kind: h.kind,
    ok: h.ok,
    detail: h.detail,
    epoch: h.epoch && { id: h.epoch.id, floor: h.epoch.floor.toString() },
  };
}

export interface StatusRoutesOptions {
  store: Store;
  events: EventLog;
  /** Null when this process serves no gateway (no routes, no breakers). */
  policy: PolicyHolder | null;
  breakers: BreakerBoard | null;
  /** With serve --workers: how many workers serve the data listener (shown as `workers`). */
  workers?: () => { ready: number; configured: number };
}

async function statusRoutes(app: FastifyInstance, opts: StatusRoutesOptions): Promise<void> {
  app.get('/v1/status', async () => {
    const [health] = await Promise.all([storeHealth(opts.store), opts.breakers?.refresh()]);
    const policy = opts.policy?.current ?? null;
    const upstreams = Object.values(policy?.upstreams ?? {}).map((u) => ({
      name: u.name,
      kind: u.kind,
      url: u.url,
      breaker: opts.breakers?.upstream(u.name) ?? null,
    }));
    const routes = (policy?.routes ?? []).map((r) => ({
      name: r.name,
      methods: r.methods,
      path: r.path.source,
      upstream: r.upstream.name,
      kind: r.upstream.kind,
      lock: r.lock?.source ?? null,
      fencing: r.fencing && { check: r.fencing.check, enforce: r.fencing.enforce },
    }));
    return {
      time: new Date().toISOString(),
      // What runs, since when: the dashboard's header shows it beside the store.
      version: VERSION,
      uptimeS: Math.floor(process.uptime()),
      store: { ...storeHealthJson(health), breaker: opts.breakers?.store() ?? null },
      upstreams,
      routes,
      events: { total: opts.events.total, retained: opts.events.retained },
      ...(opts.workers ? { workers: opts.workers() } : {}),
    };
  });

  app.get('/v1/upstreams', async () => {
    await opts.breakers?.refresh();
    const stats = opts.breakers?.upstreamStats() ?? {};
    const now = Date.now();
    const upstreams = Object.values(opts.policy?.current.upstreams ?? {}).map((u) => {
      const s = stats[u.name];
      return {
        name: u.name,
        kind: u.kind,
        url: u.url,
        breaker: opts.breakers?.upstream(u.name) ?? null,
        // postgres upstreams answer as database transactions: nothing is counted for them.
        counted: u.kind !== 'postgres',
        requests: s?.requests ?? 0,
        errors: s?.errors ?? 0,
        errorRate:
          s === undefined || s.requests === 0 ? null : Math.round((s.errors / s.requests) * 1000) / 1000,
        statuses: s?.statuses ?? {},
        latencyMs: s?.latencyMs ?? { mean: null, p50: null, p99: null },
        lastError: s?.lastError ?? null,
        from: s?.from ?? new Date(now - WINDOW_MS).toISOString(),
      };
    });
    return { time: new Date(now).toISOString(), windowS: WINDOW_MS / 1000, upstreams };
  });
}

export default fp(statusRoutes, { name: 'fencegate-status', fastify: '5.x' });
