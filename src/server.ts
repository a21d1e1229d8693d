/**
 * `fencegate serve`: one process running the issuer and the control API on the
 * control listener, and the fencing gateway on the data listener, over one store.
 * The two halves are built separately (buildControlPlane, buildDataPlane over a
 * ServeCore) so that `serve --workers N` can run the control plane in its primary and
 * the data plane in each worker (src/workers/).
 */
import type { FastifyInstance } from 'fastify';
import { DEFAULTS, type ServeConfig } from './config.js';
import { buildControl } from './control.js';
import { Issuer } from './issuer/service.js';
import { BreakerBoard } from './observe/breakers.js';
import { EventLog } from './observe/events.js';
import { fencedWriteLog, lifecycleLogger, silentLogger, type Logger } from './observe/log.js';
import { OwnerLookup } from './observe/owners.js';
import { createMetrics } from './observe/metrics.js';
import type { Metrics } from './observe/metrics.js';
import { instrumentStore } from './observe/store-metrics.js';
import { openStore, redactStoreSpec } from './store/index.js';
import type { Store } from './store/types.js';
import { createGateway } from './gateway/index.js';
import { PolicyHolder, formatPolicyError } from './policy/index.js';
import type { ReloadResult } from './policy/index.js';
import { startSampleUpstream } from './sample/index.js';
import { SequencerIssuer, type KeyRing } from './sequencer/index.js';
import { openSequencerKeys } from './sequencer/setup.js';

export interface RunningServer {
  data: string;
  control: string;
  sample: string | null;
  store: Store;
  metrics: Metrics;
  policy: PolicyHolder;
  /** Reloads the policy now (SIGHUP), counting and logging the outcome as a file change does. */
  reload(trigger: ReloadTrigger): Promise<ReloadResult>;
  /** The sequencer key file this process follows (null: sequencers off). */
  sequencerKeys: KeyRing | null;
  close(): Promise<void>;
}

/** What started a policy reload: a file change seen by the watcher, or a signal. */
export type ReloadTrigger = 'watch' | 'SIGHUP';

function address(app: FastifyInstance): string {
  const a = app.server.address();
  if (a === null || typeof a === 'string') return String(a);
  const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  return `http://${host}:${a.port}`;
}

/**
 * Starts everything. `logger` is the process's root logger (src/observe/log.ts): the
 * listeners log through children bound to `listener`, lifecycle lines (store, reloads)
 * through lifecycleLogger.
 */
export async function startServer(
  config: Readonly<ServeConfig>,
  logger: Logger = silentLogger(),
): Promise<RunningServer> {
  const core = await openCore(config, logger);
  try {
    const events = controlEventLog(core);
    const breakers = new BreakerBoard();
    const { control, sample } = await buildControlPlane(core, events, breakers);
    const gateway = await buildDataPlane(core, events, breakers);
    await control.listen({ host: config.control.host, port: config.control.port });
    await gateway.listen({ host: config.listen.host, port: config.listen.port });
    const reloaded = countedReload(core);
    core.policy.watch((result) => reloaded(result, 'watch'));
    core.closers.unshift(async () => core.policy.unwatch());
    logStore(core);
    return {
      data: address(gateway),
      control: address(control),
      sample,
      store: core.store,
      metrics: core.metrics,
      policy: core.policy,
      reload: async (trigger) => reloaded(await core.policy.reload(), trigger),
      sequencerKeys: core.sequencerKeys,
      close: () => runClosers(core.closers),
    };
  } catch (err) {
    await runClosers(core.closers);
    throw err;
  }
}

/**
 * What the control plane and the data plane of one process share: the policy, the
 * metrics registry, the store (instrumented), the sequencer keys, and the closers that
 * undo it all in reverse order. `serve` runs both planes over one core; with --workers,
 * the primary runs the control plane over its core and each worker the data plane over
 * its own (src/workers/).
 */
export interface ServeCore {
  config: Readonly<ServeConfig>;
  logger: Logger;
  lifecycle: Logger;
  policy: PolicyHolder;
  metrics: Metrics;
  store: Store;
  sequencerKeys: KeyRing | null;
  /** Run first to last by runClosers (each part unshifts its own). */
  closers: (() => Promise<unknown>)[];
}

/**
 * Loads the policy, opens the store and the sequencer keys (which it follows).
 * `startupNotes: 'debug'` logs the start-up notes (no policies, no sequencer keys) at
 * debug: a worker's primary has logged them already.
 */
export async function openCore(
  config: Readonly<ServeConfig>,
  logger: Logger,
  options: { startupNotes?: 'info' | 'debug' } = {},
): Promise<ServeCore> {
  const lifecycle = lifecycleLogger(logger);
  const quiet = options.startupNotes === 'debug';
  let starting = true;
  // A missing default ./policies is fine: a first run needs no policy (the issuer alone is useful).
  const opened = await PolicyHolder.open(config.policies, {
    mayBeMissing: config.policies === DEFAULTS.policies,
  });
  if (!opened.ok) throw new Error(`invalid policies: ${opened.errors.map(formatPolicyError).join('; ')}`);
  const policy = opened.holder;
  if (opened.missing)
    (quiet ? logger.debug.bind(logger) : lifecycle.info.bind(lifecycle))(noPolicies(config.policies));

  const metrics = createMetrics();
  const store = instrumentStore(
    await openStore(config.store, {
      allowVolatileRedis: config.allowVolatileRedis,
      ...(config.storeNamespace ? { namespace: config.storeNamespace } : {}),
    }),
    metrics,
  );
  const closers: (() => Promise<unknown>)[] = [() => store.close()];
  try {
    const sequencerKeys = await openSequencerKeys(config.sequencerKeys, config.store, (line) =>
      quiet && starting ? logger.debug(line) : lifecycle.warn(line),
    );
    starting = false;
    if (sequencerKeys !== null) {
      sequencerKeys.watch();
      closers.unshift(async () => sequencerKeys.close());
    }
    return { config, logger, lifecycle, policy, metrics, store, sequencerKeys, closers };
  } catch (err) {
    await runClosers(closers);
    throw err;
  }
}

/** The event log the control listener serves: owners looked up, lines rate-limited. */
export function controlEventLog(core: ServeCore): EventLog {
  const owners = new OwnerLookup(core.store);
  return new EventLog({
    log: fencedWriteLog(core.logger, core.metrics.logLinesSuppressed),
    owners: (lock, token) => owners.owner(lock, token),
  });
}

/** The issuer, the control listener (not yet listening) and the sample upstream. */
export async function buildControlPlane(
  core: ServeCore,
  events: EventLog,
  breakers: BreakerBoard,
  cluster: Pick<Parameters<typeof buildControl>[0], 'scrape' | 'workers'> = {},
): Promise<{ control: FastifyInstance; sample: string | null }> {
  const { config, store, metrics, sequencerKeys } = core;
  const issuer = new Issuer(store, metrics, {
    minTtlMs: config.minTtlMs,
    maxTtlMs: config.maxTtlMs,
    maxWaitMs: config.maxWaitMs,
  });
  let sample: string | null = null;
  if (config.sample) {
    const s = await startSampleUpstream(config.sample);
    core.closers.unshift(() => s.close());
    sample = s.url;
  }
  const control = await buildControl({
    store,
    issuer,
    metrics,
    events,
    defaultTtlMs: config.defaultTtlMs,
    logger: core.logger,
    accessLog: config.accessLog > 0,
    policy: core.policy,
    breakers,
    sequencers: sequencerKeys === null ? null : new SequencerIssuer(sequencerKeys, store),
    ...cluster,
  });
  core.closers.unshift(async () => {
    issuer.shutdown();
    await control.close();
  });
  return { control, sample };
}

/** The gateway (not yet listening): it opens its session in the store now. */
export async function buildDataPlane(
  core: ServeCore,
  events: EventLog,
  breakers: BreakerBoard,
): Promise<FastifyInstance> {
  const { config } = core;
  const gateway = await createGateway({
    store: core.store,
    policy: core.policy,
    metrics: core.metrics,
    events,
    logger: core.logger,
    accessLog: config.accessLog,
    storeBreaker: { timeoutMs: config.storeTimeoutMs, resetTimeoutMs: config.storeResetTimeoutMs },
    session: { ttlMs: config.sessionTtlMs },
    breakers,
    sequencerKeys: core.sequencerKeys,
  });
  core.closers.unshift(() => gateway.close());
  return gateway;
}

/** A reload's outcome counted (fencegate_policy_reloads_total) and logged. */
export function countedReload(
  core: ServeCore,
): (result: ReloadResult, trigger: ReloadTrigger) => ReloadResult {
  return (result, trigger) => {
    core.metrics.policyReloads.inc({ outcome: result.ok ? 'success' : 'failure' });
    logReload(core.lifecycle, result, trigger);
    return result;
  };
}

/** The start-up line naming the store. */
export function logStore(core: ServeCore): void {
  const spec = redactStoreSpec(core.config.store);
  core.lifecycle.info({ store: core.store.kind, spec }, `store ${core.store.kind} ${spec}`);
}

/** The URL a listening fastify instance is bound to. */
export function listenerAddress(app: FastifyInstance): string {
  return address(app);
}

/** The start-up line when the default policy directory does not exist. */
export function noPolicies(path: string): string {
  return (
    `no policies: ${path} does not exist, so no routes are proxied (the data listener answers 404 ` +
    'to every request); the lock issuer runs. Create it (fencegate init) and send SIGHUP, or restart.'
  );
}

export async function runClosers(closers: (() => Promise<unknown>)[]): Promise<void> {
  for (const c of closers.splice(0)) await c().catch(() => undefined);
}

/**
 * A reload's log line: info with the routes in force, or error with every problem
 * (file:line:col: field: message) while the last good policy keeps serving.
 */
export function logReload(log: Logger, result: ReloadResult, trigger: ReloadTrigger): void {
  const prefix = trigger === 'SIGHUP' ? 'SIGHUP: ' : '';
  if (result.ok) {
    const routes = result.policy.routes.map((r) => r.name);
    log.info(
      { reload: { outcome: 'success', trigger, routes } },
      `${prefix}policies reloaded (${routes.length} routes)`,
    );
  } else {
    const errors = result.errors.map(formatPolicyError);
    log.error(
      { reload: { outcome: 'failure', trigger, errors } },
      `${prefix}policy reload failed, keeping the last good policy`,
    );
  }
}
