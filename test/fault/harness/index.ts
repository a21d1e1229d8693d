/**
 * Shared workload + history collection for the fault scenarios in test/fault/.
 *
 *   const store = await openFaultStore('redis');            // or 'postgres', 'embedded', 'redis-durable'
 *   const upstream = await startGatedUpstream();            // or startSampleUpstream({ port: 0 })
 *   const { file } = await ordersPolicy(upstream.url);
 *   const gw = await startFencegate([...store.args, '--policies', file]);
 *   const history = new HistoryRecorder();                  // grants + every write attempt
 *   await runWorkload(history, { workers: 4, orderIds: ['1', '2'], ttlMs: 500, maxOps: 100,
 *     maxDurationMs: 30_000, endpoint: () => ({ control: gw.control, data: gw.data }) });
 *   await expectHistoryOk(upstream.url, history);           // GET /_writes + checkHistory
 *   await gw.kill(); await upstream.close(); await store.cleanup();
 *
 * Writes carry X-Request-Id (a unique op id, joined with the upstream's record) and
 * X-Client-Id (the lock owner); connection errors are recorded as 'error' and client
 * timeouts as 'timeout' (indeterminate), and the client record is complete, so the checker
 * also looks for phantom writes.
 */
export { openFaultStore, PG_URL, SHARED_REDIS_URL, type FaultStore, type StoreKind } from './stores.js';
export { ordersPolicy, writePolicy, type RouteSpec, type UpstreamSpec } from './policy.js';
export {
  checkRun,
  expectHistoryOk,
  fetchWrites,
  HistoryRecorder,
  opId,
  type WriteRequest,
  type WriteResult,
} from './history.js';
export { runWorkload, type Endpoint, type WorkloadOptions, type WorkloadStats } from './workload.js';
export { startGatedUpstream, type GatedUpstream, type UpstreamEvent } from './upstream.js';
export { ChildClient, startChildClient } from './child.js';
export {
  expectRunClean,
  FaultSite,
  newRun,
  SESSION_TTL,
  useFaultSite,
  writeUntilForwarded,
  type FaultSiteOptions,
  type Run,
  type SiteGateway,
} from './site.js';
