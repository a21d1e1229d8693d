/**
 * Prometheus metrics (prom-client), one registry per process so several servers
 * can live in one test process. Names are part of the contract (docs/gateway.md, docs/issuer.md).
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export type FencedReason = 'stale' | 'forged' | 'missing' | 'lease' | 'malformed' | 'unavailable';

export function createMetrics(options: { defaultMetrics?: boolean } = {}) {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: registry, prefix: 'fencegate_' });
  const registers = [registry];
  return {
    registry,
    fencedWrites: new Counter({
      name: 'fencegate_fenced_writes_total',
      help: 'Writes refused (or, in shadow mode, that would have been refused) by the fence',
      labelNames: ['route', 'reason', 'enforced'] as const,
      registers,
    }),
    admittedWrites: new Counter({
      name: 'fencegate_admitted_writes_total',
      help: 'Fenced writes admitted and forwarded',
      labelNames: ['route'] as const,
      registers,
    }),
    acquireSeconds: new Histogram({
      name: 'fencegate_acquire_seconds',
      help: 'Time to answer an acquire, including waiting in the queue',
      labelNames: ['outcome'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    }),
    lockContention: new Counter({
      name: 'fencegate_lock_contention_total',
      help: 'Acquire attempts that found the lock held',
      registers,
    }),
    holdSeconds: new Histogram({
      name: 'fencegate_hold_seconds',
      help: 'How long leases were held until release',
      buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600],
      registers,
    }),
    leaseRenewFailures: new Counter({
      name: 'fencegate_lease_renew_failures_total',
      help: 'Renewals refused because the lease was lost',
      registers,
    }),
    leasesExpired: new Counter({
      name: 'fencegate_leases_expired_total',
      help: 'Leases that lapsed without release and were taken over',
      registers,
    }),
    releaseOwnerMismatch: new Counter({
      name: 'fencegate_release_owner_mismatch_total',
      help: 'Releases refused because the lease did not hold the lock',
      registers,
    }),
    lockWaiters: new Gauge({
      name: 'fencegate_lock_waiters',
      help: 'Acquires currently waiting in this process',
      registers,
    }),
    acquireTimeouts: new Counter({
      name: 'fencegate_acquire_timeouts_total',
      help: 'Waiting acquires that gave up after waitMs',
      registers,
    }),
    drainWaitSeconds: new Histogram({
      name: 'fencegate_drain_wait_seconds',
      help: 'Time a write waited at the drain barrier for lower-token writes to finish',
      labelNames: ['outcome'] as const,
      buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30],
      registers,
    }),
    storeErrors: new Counter({
      name: 'fencegate_store_errors_total',
      help: 'Store operations that failed (backend unreachable or erroring)',
      labelNames: ['op'] as const,
      registers,
    }),
    upstreamSeconds: new Histogram({
      name: 'fencegate_upstream_seconds',
      help: 'Upstream response time as seen by the gateway',
      labelNames: ['upstream', 'status_class'] as const,
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    }),
    sessionsLost: new Counter({
      name: 'fencegate_gateway_sessions_lost_total',
      help: 'Times this process found its gateway session ended by another gateway (it was paused or cut off past its TTL)',
      registers,
    }),
    storeClockJumps: new Counter({
      name: 'fencegate_store_clock_jumps_total',
      help: 'Times the store clock moved more than the session TTL away from this process between two beats',
      registers,
    }),
    forwardsCut: new Counter({
      name: 'fencegate_forwards_cut_total',
      help: 'Forwarded requests cut by the gateway: body idle, upload too long, upstream answer late, session lapsed',
      labelNames: ['reason'] as const,
      registers,
    }),
    tokensIssued: new Counter({
      name: 'fencegate_tokens_issued_total',
      help: 'Fencing tokens minted by the issuer',
      registers,
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
