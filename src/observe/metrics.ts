/**
 * Prometheus metrics (prom-client), one registry per process so several servers
 * can live in one test process. Every metric is defined here; names, labels and
 * meanings are part of the contract (docs/observability.md).
 *
 * Conventions: prom-client's default process and Node metrics under their standard
 * (unprefixed) names; counters end in `_total` and nothing else does; labels take
 * bounded values only (route and upstream names from the policy, fixed enums), never
 * lock keys or tokens; labelled series exist at zero from the start (seedPolicy) so
 * a dashboard shows 0, not "no data".
 *
 * Hot-path counters (requests, admitted and fenced writes, drain timeouts) are Tallies: a plain
 * number per label set, resolved once per route and added to prom-client's counter
 * when /metrics is scraped. An increment is then one property addition, where
 * counter.inc(labels) would build a label hash string and validate the labels
 * (~0.5 µs). Hot-path histograms (store operations, upstream requests) keep their
 * buckets the same way (HistogramCell: ~20 ns an observation instead of ~0.8 µs).
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { BREAKER_STATES, type BreakerState } from '../breakers/circuit.js';
import { CUT_REASONS, FENCED_REASONS, IDEMPOTENCY_OUTCOMES, type FencedReason } from '../gateway/reasons.js';
import type { CompiledPolicy } from '../policy/index.js';
import { STORE_OPS } from '../store/ops.js';
import { VERSION } from '../version.js';

/** Status classes of fencegate_requests_total; index = Math.floor(status / 100). */
export const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const;

/** The breaker label of the fence store's circuit (upstream circuits use the upstream name). */
export const STORE_BREAKER = 'store';

/** The route label of data-listener requests that matched no route. */
export const NO_ROUTE = 'none';

/** prom-client default metrics left out: gauges named like counters. */
export const DEFAULT_TOTAL_GAUGES = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
] as const;

const DRAIN_OUTCOMES = ['cleared', 'timeout', 'aborted', 'lapsed', 'error'] as const;

/** One counter series as a plain number: `tally.n += 1` on the hot path. */
export interface Tally {
  n: number;
}

/** A counter whose series are Tallies, published into prom-client on each scrape. */
class TalliedCounter<L extends string> {
  readonly counter: Counter<L>;
  private readonly cells = new Map<string, { labels: Record<L, string>; tally: Tally; reported: number }>();

  constructor(config: { name: string; help: string; labelNames: readonly L[]; registers: Registry[] }) {
    this.counter = new Counter<L>({ ...config, collect: () => this.publish() });
  }

  /** The tally of one label set (created at 0, so its series exists from now on). */
  tally(labels: Record<L, string>): Tally {
    const key = Object.values<string>(labels).join('\u0000');
    let cell = this.cells.get(key);
    if (cell === undefined) {
      cell = { labels, tally: { n: 0 }, reported: 0 };
      this.cells.set(key, cell);
      this.counter.inc(labels, 0);
    }
    return cell.tally;
  }

  private publish(): void {
    for (const cell of this.cells.values()) {
      const delta = cell.tally.n - cell.reported;
      if (delta > 0) this.counter.inc(cell.labels, delta);
      cell.reported = cell.tally.n;
    }
  }
}

/** One histogram series as plain numbers: `cell.observe(seconds)` on the hot path. */
export class HistogramCell {
  /** Observations per bucket (not cumulative); above the last bound only in `count`. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > (bounds[i] as number)) i += 1;
    if (i < bounds.length) this.counts[i] = (this.counts[i] as number) + 1;
    this.sum += value;
    this.count += 1;
  }
}

/**
 * A prom-client Histogram whose series are HistogramCells, exported by get() (which the
 * registry reads for /metrics) in the same form as prom-client's own series.
 */
class TalliedHistogram<L extends string> extends Histogram<L> {
  private readonly bounds: readonly number[];
  private readonly metric: string;
  private readonly cells = new Map<string, { labels: Record<L, string>; cell: HistogramCell }>();

  constructor(config: {
    name: string;
    help: string;
    labelNames: readonly L[];
    buckets: number[];
    registers: Registry[];
  }) {
    super(config);
    this.bounds = [...config.buckets].sort((a, b) => a - b);
    this.metric = config.name;
  }

  /** The cell of one label set (its series exists, at 0, from now on). */
  cell(labels: Record<L, string>): HistogramCell {
    const key = Object.values<string>(labels).join('\u0000');
    let entry = this.cells.get(key);
    if (entry === undefined) {
      entry = { labels, cell: new HistogramCell(this.bounds) };
      this.cells.set(key, entry);
    }
    return entry.cell;
  }

  /**
   * What the registry reads for /metrics (and get() for JSON): prom-client's own series
   * followed by the cells', in prom-client's form (`le` in labels, the series' labels in
   * sharedLabels). test/unit/metrics-tallies.test.ts compares the two expositions.
   */
  async getForPromString(): Promise<{ values: Record<string, unknown>[] }> {
    const parent = (Histogram.prototype as unknown as Record<string, unknown>).getForPromString as (
      this: unknown,
    ) => Promise<{ values: Record<string, unknown>[] }>;
    const base = await parent.call(this);
    const bucket = `${this.metric}_bucket`;
    for (const { labels, cell } of this.cells.values()) {
      let cumulative = 0;
      this.bounds.forEach((le, i) => {
        cumulative += cell.counts[i] as number;
        base.values.push({ labels: { le }, sharedLabels: labels, value: cumulative, metricName: bucket });
      });
      base.values.push(
        { labels: { le: '+Inf' }, sharedLabels: labels, value: cell.count, metricName: bucket },
        { labels: {}, sharedLabels: labels, value: cell.sum, metricName: `${this.metric}_sum` },
        { labels: {}, sharedLabels: labels, value: cell.count, metricName: `${this.metric}_count` },
      );
    }
    return base;
  }
}

/**
 * The duration histograms renamed to the `_duration_seconds` convention in 0.2, each
 * with the name it had before, still exported (same help, labels and values) as a
 * deprecated alias for one release: new name → old name. docs/observability.md,
 * "Deprecated names".
 */
export const DEPRECATED_ALIASES = {
  fencegate_acquire_duration_seconds: 'fencegate_acquire_seconds',
  fencegate_lease_hold_duration_seconds: 'fencegate_hold_seconds',
  fencegate_drain_wait_duration_seconds: 'fencegate_drain_wait_seconds',
} as const;

/** A histogram exported under its name and its deprecated one: every observation goes to both. */
class AliasedHistogram<L extends string> {
  private readonly main: Histogram<L>;
  private readonly alias: Histogram<L>;

  constructor(config: {
    name: keyof typeof DEPRECATED_ALIASES;
    help: string;
    labelNames: readonly L[];
    buckets: number[];
    registers: Registry[];
  }) {
    this.main = new Histogram<L>(config);
    this.alias = new Histogram<L>({
      ...config,
      name: DEPRECATED_ALIASES[config.name],
      help: `Deprecated alias of ${config.name} (removed in the next release): ${config.help}`,
    });
  }

  observe(labels: Partial<Record<L, string>>, seconds: number): void {
    this.main.observe(labels, seconds);
    this.alias.observe(labels, seconds);
  }

  /** Makes the series of `labels` exist at 0 under both names. */
  zero(labels: Record<L, string>): void {
    this.main.zero(labels);
    this.alias.zero(labels);
  }

  get(): ReturnType<Histogram<L>['get']> {
    return this.main.get();
  }
}

/** A fenced route's hot-path tallies, resolved once per route name. */
export interface FenceTallies {
  readonly admitted: Tally;
  readonly drainTimeouts: Tally;
  /** Admitted writes that joined an admission hold (no store round trip). */
  readonly held: Tally;
  /** fencegate_fenced_writes_total for one reason, enforced or in shadow mode (made at 0 on first use). */
  refused(reason: FencedReason, enforced: boolean): Tally;
}

/**
 * The per-lock structures whose sizes fencegate_tracked_locks reports, each bounded
 * (docs/observability.md, "Bounded per-lock memory"): the label values of `structure`.
 */
export const TRACKED_STRUCTURES = [
  'stale-cache',
  'shadow-stale-cache',
  'stale-refusals',
  'admission-holds',
  'unfinished-finishes',
  'gone-sessions',
  'sequencer-cache',
  'owner-lookups',
  'issuer-grants',
] as const;
export type TrackedStructure = (typeof TRACKED_STRUCTURES)[number];

export function createMetrics(options: { defaultMetrics?: boolean } = {}) {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) {
    collectDefaultMetrics({ register: registry });
    // Gauges whose names end in _total break the convention (promtool check metrics
    // flags them); each is the sum over its `type` label of the metric of the same
    // name without the suffix (nodejs_active_handles{type}, ...), which stays.
    for (const name of DEFAULT_TOTAL_GAUGES) registry.removeSingleMetric(name);
  }
  const registers = [registry];

  const requests = new TalliedCounter({
    name: 'fencegate_requests_total',
    help: 'Requests answered on the data listener, by policy route ("none": matched no route) and status class',
    labelNames: ['route', 'status_class'] as const,
    registers,
  });
  const admitted = new TalliedCounter({
    name: 'fencegate_admitted_writes_total',
    help: 'Fenced writes admitted and forwarded (in shadow mode: that would have been admitted)',
    labelNames: ['route'] as const,
    registers,
  });
  const drainTimeouts = new TalliedCounter({
    name: 'fencegate_drain_timeouts_total',
    help: 'Writes refused because lower-token writes did not finish within drainTimeoutMs (ordering violations avoided)',
    labelNames: ['route'] as const,
    registers,
  });
  const held = new TalliedCounter({
    name: 'fencegate_held_admissions_total',
    help: 'Admitted writes that joined an earlier admission of the same token on this process (admission hold: no store round trip)',
    labelNames: ['route'] as const,
    registers,
  });
  const fenced = new TalliedCounter({
    name: 'fencegate_fenced_writes_total',
    help: 'Writes refused (or, in shadow mode, that would have been refused) by the fence',
    labelNames: ['route', 'reason', 'enforced'] as const,
    registers,
  });
  const upstreamTimings = new Map<string, (HistogramCell | undefined)[]>();
  const routeRequests = new Map<string, readonly Tally[]>();
  const fenceTallies = new Map<string, FenceTallies>();
  const none = requestTallies(NO_ROUTE);

  function requestTallies(route: string): Tally[] {
    const byClass: Tally[] = [{ n: 0 }];
    for (const status_class of STATUS_CLASSES) byClass.push(requests.tally({ route, status_class }));
    return byClass;
  }

  // What each tracked structure's size is read from, when scraped (trackSize).
  const sizes = new Map<TrackedStructure, Set<() => number>>();

  const metrics = {
    registry,
    buildInfo: new Gauge({
      name: 'fencegate_build_info',
      help: "fencegate's version and the Node.js version running it; always 1",
      labelNames: ['version', 'node'] as const,
      // With --workers every process runs the same build: one series, not their sum.
      aggregator: 'max',
      registers,
    }),
    trackedLocks: new Gauge({
      name: 'fencegate_tracked_locks',
      help: 'Entries held now in a bounded per-lock structure of this process (locks, leases or sessions; see docs/observability.md for each bound)',
      labelNames: ['structure'] as const,
      registers,
      collect() {
        for (const structure of TRACKED_STRUCTURES) {
          let n = 0;
          for (const read of sizes.get(structure) ?? []) n += read();
          this.set({ structure }, n);
        }
      },
    }),

    /**
     * Reports `read()` as the size of `structure` in fencegate_tracked_locks (summed when
     * several register one); returns the function that stops it (the owner closed).
     */
    trackSize(structure: TrackedStructure, read: () => number): () => void {
      let set = sizes.get(structure);
      if (set === undefined) sizes.set(structure, (set = new Set()));
      set.add(read);
      return () => void set.delete(read);
    },
    /** Published from tallies (requestsOf); read with .get(). */
    requests: requests.counter,
    /** Published from tallies (fenceOf(route).admitted). */
    admittedWrites: admitted.counter,
    /** Published from tallies (fenceOf(route).drainTimeouts). */
    drainTimeouts: drainTimeouts.counter,
    /** Published from tallies (fenceOf(route).held). */
    heldAdmissions: held.counter,
    /** Published from tallies (fenceOf(route).refused(reason, enforced)). */
    fencedWrites: fenced.counter,
    acquireSeconds: new AliasedHistogram({
      name: 'fencegate_acquire_duration_seconds',
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
    holdSeconds: new AliasedHistogram({
      name: 'fencegate_lease_hold_duration_seconds',
      help: 'How long leases granted by this issuer were held, by how they ended (released, expired)',
      labelNames: ['end'] as const,
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
    lockOrderViolations: new Counter({
      name: 'fencegate_lock_order_violations_total',
      help: 'Acquires by an owner holding a lock that sorts after the one asked for (canonical order); action: counted or refused',
      labelNames: ['action'] as const,
      registers,
    }),
    acquireTimeouts: new Counter({
      name: 'fencegate_acquire_timeouts_total',
      help: 'Waiting acquires that gave up after waitMs',
      registers,
    }),
    drainWaitSeconds: new AliasedHistogram({
      name: 'fencegate_drain_wait_duration_seconds',
      help: 'Time a write waited at the drain barrier for lower-token writes to finish',
      labelNames: ['outcome'] as const,
      buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30],
      registers,
    }),
    storeOperationSeconds: new TalliedHistogram({
      name: 'fencegate_store_operation_duration_seconds',
      help: 'Time of each lock/fence store operation, issuer and gateway side, failed ones included',
      labelNames: ['op'] as const,
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    }),
    storeErrors: new Counter({
      name: 'fencegate_store_errors_total',
      help: 'Store operations that failed (backend unreachable or erroring), issuer and gateway side',
      labelNames: ['op'] as const,
      registers,
    }),
    upstreamRequestSeconds: new TalliedHistogram({
      name: 'fencegate_upstream_request_duration_seconds',
      help: 'Time from sending a request to an HTTP upstream until its response headers (or failure), by upstream and status class',
      labelNames: ['upstream', 'status_class'] as const,
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    }),
    breakerState: new Gauge({
      name: 'fencegate_breaker_state',
      help: 'Circuit breaker state: 1 for the current state, 0 for the others (breaker "store" or an upstream name)',
      labelNames: ['breaker', 'state'] as const,
      // With --workers: 1 when any worker's breaker is in that state (src/workers/metrics.ts).
      aggregator: 'max',
      registers,
    }),
    policyReloads: new Counter({
      name: 'fencegate_policy_reloads_total',
      help: 'Policy reloads (file change or SIGHUP), by outcome; a failed one keeps the last good policy',
      labelNames: ['outcome'] as const,
      registers,
    }),
    idempotency: new Counter({
      name: 'fencegate_idempotency_total',
      help:
        'Requests with an idempotency key on routes that declare one, by outcome: begun (forwarded), replayed, ' +
        'in-flight (409), mismatch (422); a begun one then ends stored or abandoned',
      labelNames: ['route', 'outcome'] as const,
      registers,
    }),
    lockDelayWaits: new Counter({
      name: 'fencegate_lock_delay_waits_total',
      help:
        'Fenced writes that waited at the drain barrier behind writes a stopped gateway had delivered ' +
        '(the lock-delay: their upstream bound after the stopped session was seen gone)',
      labelNames: ['route'] as const,
      registers,
    }),
    storeResets: new Counter({
      name: 'fencegate_store_resets_total',
      help:
        'Times this gateway found the fence store lost or replaced its state (its session gone while valid, ' +
        'another epoch, another store behind the connection); fenced writes then wait for their lock-delay',
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
    authRefusals: new Counter({
      name: 'fencegate_auth_refusals_total',
      help: 'Control-listener requests refused by the auth file: unauthenticated (401), forbidden (403), throttled or busy (429)',
      labelNames: ['reason'] as const,
      registers,
    }),
    tokensIssued: new Counter({
      name: 'fencegate_tokens_issued_total',
      help: 'Fencing tokens minted by the issuer',
      registers,
    }),
    workerRestarts: new Counter({
      name: 'fencegate_worker_restarts_total',
      help: 'Worker processes the primary started again after they died (serve --workers)',
      registers,
    }),
    logLinesSuppressed: new Counter({
      name: 'fencegate_log_lines_suppressed_total',
      help: 'Fenced-write log lines dropped by the log rate limit (each drop is still an event and counted)',
      registers,
    }),

    /**
     * fencegate_requests_total tallies of a route, by status class index
     * (Math.floor(status / 100); [0] unused). Made at 0 on first use; seedPolicy makes
     * them for every route.
     */
    requestsOf(route: string): readonly Tally[] {
      let t = routeRequests.get(route);
      if (t === undefined) {
        t = requestTallies(route);
        routeRequests.set(route, t);
      }
      return t;
    },

    /** A fenced route's tallies (made at 0 on first use; seedPolicy makes them for every fenced route). */
    fenceOf(route: string): FenceTallies {
      let t = fenceTallies.get(route);
      if (t === undefined) {
        // By reason, then enforced (odd) or shadow (even).
        const refusals: (Tally | undefined)[] = [];
        t = {
          admitted: admitted.tally({ route }),
          drainTimeouts: drainTimeouts.tally({ route }),
          held: held.tally({ route }),
          refused(reason, enforced) {
            const i = FENCED_REASONS.indexOf(reason) * 2 + (enforced ? 1 : 0);
            return (refusals[i] ??= fenced.tally({ route, reason, enforced: String(enforced) }));
          },
        };
        fenceTallies.set(route, t);
      }
      return t;
    },

    /**
     * The fencegate_upstream_request_duration_seconds cell of an upstream and status
     * class: 1–5 for 1xx–5xx, 0 for `error` (no answer). Made on first use.
     */
    upstreamTiming(upstream: string, status: number): HistogramCell {
      const statusClass = status >= 1 && status <= 5 ? status : 0;
      let byClass = upstreamTimings.get(upstream);
      if (byClass === undefined) {
        byClass = [];
        upstreamTimings.set(upstream, byClass);
      }
      let cell = byClass[statusClass];
      if (cell === undefined) {
        const label = statusClass === 0 ? 'error' : (STATUS_CLASSES[statusClass - 1] ?? 'error');
        cell = metrics.upstreamRequestSeconds.cell({ upstream, status_class: label });
        byClass[statusClass] = cell;
      }
      return cell;
    },

    /** fencegate_requests_total tallies of requests that matched no route. */
    noRoute: none as readonly Tally[],

    /** Sets a breaker's state gauge: 1 for `state`, 0 for the others. */
    setBreakerState(breaker: string, state: BreakerState): void {
      for (const s of BREAKER_STATES) metrics.breakerState.set({ breaker, state: s }, s === state ? 1 : 0);
    },

    /** Removes a breaker's series (its upstream left the policy). */
    dropBreaker(breaker: string): void {
      for (const state of BREAKER_STATES) metrics.breakerState.remove({ breaker, state });
    },
  };

  for (const outcome of ['success', 'failure']) metrics.policyReloads.inc({ outcome }, 0);
  for (const op of STORE_OPS) metrics.storeErrors.inc({ op }, 0);
  for (const outcome of DRAIN_OUTCOMES) metrics.drainWaitSeconds.zero({ outcome });
  for (const outcome of ['granted', 'held']) metrics.acquireSeconds.zero({ outcome });
  for (const end of ['released', 'expired']) metrics.holdSeconds.zero({ end });
  for (const reason of CUT_REASONS) metrics.forwardsCut.inc({ reason }, 0);
  for (const reason of ['unauthenticated', 'forbidden', 'throttled', 'busy'])
    metrics.authRefusals.inc({ reason }, 0);
  metrics.buildInfo.set({ version: VERSION, node: process.versions.node }, 1);
  return metrics;
}

export type Metrics = ReturnType<typeof createMetrics>;

/**
 * Makes the route series of `policy` exist (at 0 until something happens): requests by
 * status class for every route; for every fenced route also admitted writes, drain
 * timeouts, fenced writes by reason and lock-delay waits. Called at start and after each reload; series
 * of routes that left the policy stay.
 */
export function seedPolicy(metrics: Metrics, policy: CompiledPolicy): void {
  for (const route of policy.routes) {
    metrics.requestsOf(route.name);
    if (route.idempotency !== null)
      for (const outcome of IDEMPOTENCY_OUTCOMES) metrics.idempotency.inc({ route: route.name, outcome }, 0);
    if (route.fencing === null) continue;
    const tallies = metrics.fenceOf(route.name);
    for (const reason of FENCED_REASONS) tallies.refused(reason, route.fencing.enforce);
    metrics.lockDelayWaits.inc({ route: route.name }, 0);
  }
}
