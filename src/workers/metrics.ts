/**
 * /metrics with --workers: the primary's registry and every worker's, merged the way
 * prom-client's AggregatorRegistry merges cluster metrics. Each metric says how
 * (`aggregator`): counters and histograms (buckets, sum, count) are summed, so
 * `fencegate_admitted_writes_total` counts the writes admitted by every worker; gauges
 * are summed unless they say otherwise (`fencegate_breaker_state` takes the maximum:
 * 1 when any worker's breaker is in that state; Node's event-loop lag is averaged).
 *
 * A worker that does not answer in time is counted with its last answer, and a worker
 * that died keeps its counters and histograms as last scraped (retire), so the sums never
 * go down when a worker is slow or restarted: Prometheus would read a drop as a counter
 * reset and count the survivors' totals again. What a worker counted between its last
 * scrape and its death is lost (counted low, never twice).
 */
import { AggregatorRegistry, type Registry } from 'prom-client';

export type MetricsSnapshot = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

/** The Prometheus text of `snapshots` merged. */
export async function aggregateMetrics(snapshots: readonly MetricsSnapshot[]): Promise<string> {
  return AggregatorRegistry.aggregate(snapshots as MetricsSnapshot[]).metrics();
}

export function isMetricsSnapshot(value: unknown): value is MetricsSnapshot {
  return Array.isArray(value);
}

/** What a dead worker leaves behind: what only grows (a gauge of a dead process means nothing). */
const KEPT = new Set(['counter', 'histogram']);

/** `retired` plus the counters and histograms of `last` (a dead worker's last snapshot). */
export async function retire(
  retired: Promise<MetricsSnapshot | null>,
  last: MetricsSnapshot,
): Promise<MetricsSnapshot | null> {
  const before = await retired;
  const kept = last.filter((m) => KEPT.has(String(m.type)));
  return AggregatorRegistry.aggregate(before === null ? [kept] : [before, kept]).getMetricsAsJSON();
}
