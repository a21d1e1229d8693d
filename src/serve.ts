/**
 * `fencegate serve`: one process running the issuer and the control API on the
 * control listener, and the fencing gateway on the data listener, over one store.
 * The two halves are built separately (buildControlPlane, buildDataPlane over a
 * ServeCore) so that `serve --workers N` can run the control plane in its primary and
 * the data plane in each worker (src/workers/).
 */
import type { FastifyInstance } from 'fastify';
import { Authenticator } from './auth/authenticate.js';
import { loadAuthFile } from './auth/file.js';
import { ConfigError, DEFAULTS, exposureProblem, type ServeConfig } from './config.js';
import { buildControl, buildProbes } from './control/control-server.js';
import { hostAllowList } from './http/allowed-hosts.js';
import { CaBundle, ListenerTls, readStoreTls, type TlsFileError } from './http/tls.js';
import { Issuer } from './issuer/service.js';
import { BreakerBoard } from './breakers/board.js';
import { EventLog } from './observe/events.js';
import { fencedWriteLog, lifecycleLogger, silentLogger, type Logger } from './observe/log.js';
import { LeaseEnds } from './observe/lease-ends.js';
import { OwnerLookup } from './observe/owners.js';
import { createMetrics } from './observe/metrics.js';
import type { Metrics } from './observe/metrics.js';
import { instrumentStore } from './observe/store-metrics.js';
import { openStore, redactStoreSpec } from './store/index.js';
import type { Store } from './store/types.js';
import { createGateway } from './gateway/index.js';
import { KINDS } from './gateway/kinds/index.js';
import { PolicyHolder, formatPolicyError } from './policy/index.js';
import type { ReloadResult } from './policy/index.js';
import { startSampleUpstream } from './sample/index.js';
import { SequencerIssuer, type KeyRing } from './sequencer/index.js';
import { openSequencerKeys } from './sequencer/setup.js';

export interface RunningServer {
  data: string;
  control: string;
  /** The probe listener's URL (--health), or null. */
  health: string | null;
  sample: string | null;
  store: Store;
  metrics: Metrics;
  policy: PolicyHolder;
  /** Reloads the policy now (SIGHUP), counting and logging the outcome as a file change does. */
  reload(trigger: ReloadTrigger): Promise<ReloadResult>;
  /** The sequencer key file this process follows (null: sequencers off). */
  sequencerKeys: KeyRing | null;
  /**
   * Re-reads the TLS files (both listeners' certificates, keys and client CAs, and
   * --upstream-ca) now (SIGHUP), logging the outcome. New handshakes get the new files;
   * open connections keep theirs; a bad file keeps the one in use.
   */
  reloadTls(trigger: ReloadTrigger): TlsReloadReport;
  /** Re-reads the auth file (SIGHUP); a file that fails to load leaves the last good one in force. */
  reloadAuth(): void;
  close(): Promise<void>;
}

/** What a TLS reload did: the files that changed, and the ones that could not be used. */
export interface TlsReloadReport {
  ok: boolean;
  /** What was replaced ("data listener", "control listener", "upstream CA"). */
  changed: string[];
  errors: TlsFileError[];
}

/** What started a policy reload: a file change seen by the watcher, or a signal. */
export type ReloadTrigger = 'watch' | 'SIGHUP';

function address(app: FastifyInstance, tls: boolean): string {
  const a = app.server.address();
  if (a === null || typeof a === 'string') return String(a);
  const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  return `${tls ? 'https' : 'http'}://${host}:${a.port}`;
}

/** The TLS files of a configuration, read and checked (a bad one throws TlsFileError naming it). */
function openTls(config: Readonly<ServeConfig>) {
  const listener = (cert: string | null, key: string | null, clientCa: string | null, what: string) =>
    cert === null || key === null ? null : new ListenerTls(what, { cert, key, clientCa });
  return {
    data: listener(config.tlsCert, config.tlsKey, config.tlsClientCa, 'data listener'),
    control: listener(
      config.controlTlsCert,
      config.controlTlsKey,
      config.controlTlsClientCa,
      'control listener',
    ),
    upstreamCa: config.upstreamCa === null ? null : new CaBundle(config.upstreamCa, 'upstream CA'),
    store: readStoreTls(config),
  };
}

type OpenedTls = ReturnType<typeof openTls>;

/**
 * Starts everything. `logger` is the process's root logger (src/observe/log.ts): the
 * listeners log through children bound to `listener`, lifecycle lines (store, reloads)
 * through lifecycleLogger.
 */
export async function startServer(
  config: Readonly<ServeConfig>,
  logger: Logger = silentLogger(),
): Promise<RunningServer> {
  const auth = openAuth(config, lifecycleLogger(logger));
  const core = await openCore(config, logger);
  try {
    const events = controlEventLog(core);
    const breakers = new BreakerBoard();
    const { control, sample } = await buildControlPlane(core, events, breakers, { auth });
    const gateway = await buildDataPlane(core, events, breakers);
    const health = await startProbes(core);
    await control.listen({ host: config.control.host, port: config.control.port });
    await gateway.listen({ host: config.listen.host, port: config.listen.port });
    const reloaded = countedReload(core);
    core.policy.watch((result) => reloaded(result, 'watch'));
    core.closers.unshift(async () => core.policy.unwatch());
    logStore(core);
    return {
      data: address(gateway, core.tls.data !== null),
      control: address(control, core.tls.control !== null),
      health: health === null ? null : address(health, false),
      sample,
      store: core.store,
      metrics: core.metrics,
      policy: core.policy,
      reload: async (trigger) => reloaded(await core.policy.reload(), trigger),
      sequencerKeys: core.sequencerKeys,
      reloadTls: (trigger) => reloadTls(core, trigger, ['data listener', 'control listener', 'upstream CA']),
      reloadAuth: () => reloadAuth(auth, core),
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
  /** The TLS files of the configuration, read and checked (each process follows all of them). */
  tls: OpenedTls;
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
  // Before anything else: a bad certificate or key stops the start with one line naming the file.
  const tls = openTls(config);
  // A missing default ./policies is fine: a first run needs no policy (the issuer alone is useful).
  const opened = await PolicyHolder.openFor(config.policies, KINDS, {
    mayBeMissing: config.policies === DEFAULTS.policies,
    env: policyEnv(config),
  });
  if (!opened.ok) throw new Error(`invalid policies: ${opened.errors.map(formatPolicyError).join('; ')}`);
  const policy = opened.holder;
  if (opened.missing)
    (quiet ? logger.debug.bind(logger) : lifecycle.info.bind(lifecycle))(noPolicies(config.policies));

  const metrics = createMetrics();
  const store = instrumentStore(
    await openStore(config.store, {
      allowVolatileRedis: config.allowVolatileRedis,
      lockRetentionMs: config.lockRetentionMs,
      ...(config.storeNamespace ? { namespace: config.storeNamespace } : {}),
      ...tls.store,
    }),
    metrics,
  );
  const closers: (() => Promise<unknown>)[] = [() => store.close()];
  try {
    const sequencerKeys = await openSequencerKeys(
      config.sequencerKeys,
      config.store,
      (level, line) => (quiet && starting ? logger.debug(line) : lifecycle[level](line)),
      { allowReadable: config.allowReadableKeyFile },
    );
    starting = false;
    if (sequencerKeys !== null) {
      sequencerKeys.watch();
      closers.unshift(async () => sequencerKeys.close());
    }
    return { config, logger, lifecycle, policy, metrics, store, sequencerKeys, tls, closers };
  } catch (err) {
    await runClosers(closers);
    throw err;
  }
}

/**
 * What `${NAME}` in the policy's upstream urls reads: the environment, and with
 * `--sample HOST:PORT` FENCEGATE_SAMPLE set to that address, so the example policy
 * (`url: http://${FENCEGATE_SAMPLE:-127.0.0.1:9000}`) points wherever the sample runs:
 * one setting moves both (`npm start -- --sample 127.0.0.1:9100`).
 */
export function policyEnv(config: Readonly<ServeConfig>): NodeJS.ProcessEnv {
  const sample = config.sample;
  if (sample === null) return process.env;
  const host = sample.host.includes(':') ? `[${sample.host}]` : sample.host;
  return { ...process.env, FENCEGATE_SAMPLE: `${host}:${sample.port}` };
}

/** The event log the control listener serves: owners looked up, lines rate-limited. */
export function controlEventLog(core: ServeCore): EventLog {
  const owners = new OwnerLookup(core.store);
  core.metrics.trackSize('owner-lookups', () => owners.size);
  return new EventLog({
    log: fencedWriteLog(core.logger, core.metrics.logLinesSuppressed),
    owners: (lock, token, highest) => owners.attribution(lock, token, highest),
    leaseEnds: new LeaseEnds(),
  });
}

/** The issuer, the control listener (not yet listening) and the sample upstream. */
export async function buildControlPlane(
  core: ServeCore,
  events: EventLog,
  breakers: BreakerBoard,
  extra: Pick<Parameters<typeof buildControl>[0], 'scrape' | 'workers' | 'auth'> = {},
): Promise<{ control: FastifyInstance; sample: string | null }> {
  const { config, store, metrics, sequencerKeys } = core;
  const issuer = new Issuer(
    store,
    metrics,
    {
      minTtlMs: config.minTtlMs,
      maxTtlMs: config.maxTtlMs,
      maxWaitMs: config.maxWaitMs,
      lockOrder: config.refuseLockOrder ? 'refuse' : 'count',
    },
    events.leaseEnds,
  );
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
    sequencers:
      sequencerKeys === null ? null : new SequencerIssuer(sequencerKeys, store, config.storeNamespace),
    tls: core.tls.control,
    allowedHosts: hostAllowList(config.allowedHosts, {
      authenticated: (extra.auth ?? null) !== null,
      bindHost: config.control.host,
    }),
    maxConnections: config.controlMaxConnections,
    eventStreams: { max: config.eventStreamsMax, perPrincipal: config.eventStreamsPerPrincipal },
    ...extra,
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
    admissionHoldMs: config.admissionHoldMs,
    refusalLane: config.refusalLane,
    breakers,
    sequencerKeys: core.sequencerKeys,
    storeNamespace: config.storeNamespace,
    tls: core.tls.data,
    upstreamCa: core.tls.upstreamCa,
  });
  core.closers.unshift(() => gateway.close());
  return gateway;
}

/**
 * The probe listener (--health), listening, or null when not configured. `probes` adds what
 * the primary of `serve --workers` serves there (merged metrics, the workers' readiness).
 */
export async function startProbes(
  core: ServeCore,
  probes: Pick<Parameters<typeof buildProbes>[0], 'scrape' | 'workers'> = {},
): Promise<FastifyInstance | null> {
  const { config } = core;
  if (config.health === null) return null;
  const app = await buildProbes({
    store: core.store,
    metrics: core.metrics,
    logger: core.logger,
    accessLog: config.accessLog > 0,
    ...probes,
  });
  core.closers.unshift(() => app.close());
  await app.listen({ host: config.health.host, port: config.health.port });
  return app;
}

/**
 * The auth file, loaded (a bad one throws with its located errors), or null without one;
 * refuses a non-loopback control listener without it unless --insecure, and says at start
 * which of the three it is. Run before anything opens.
 */
export function openAuth(config: Readonly<ServeConfig>, lifecycle: Logger): Authenticator | null {
  const exposed = exposureProblem(config);
  if (exposed !== null) throw new ConfigError(exposed);
  const auth = config.auth === null ? null : new Authenticator(loadAuthFile(config.auth));
  if (auth === null && !config.insecure) {
    lifecycle.info(
      { auth: null },
      'no auth file: the control listener takes no credentials, so it serves loopback only (docs/security.md)',
    );
  } else if (auth === null) {
    lifecycle.warn(
      { insecure: true },
      `--insecure: the control listener (${config.control.host}:${config.control.port}) takes no credentials; ` +
        'anyone who reaches it can take any lock and read live tokens (docs/security.md)',
    );
  }
  return auth;
}

/** Re-reads the auth file (SIGHUP); one that fails to load leaves the last good one in force. */
export function reloadAuth(auth: Authenticator | null, core: ServeCore): void {
  const file = core.config.auth;
  if (auth === null || file === null) return;
  try {
    const next = loadAuthFile(file);
    auth.replace(next);
    core.lifecycle.info(
      { auth: { outcome: 'success', principals: next.principals.length } },
      `auth file reloaded (${next.principals.length} principals)`,
    );
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    core.lifecycle.error(
      { auth: { outcome: 'failure', errors: message.split('\n') } },
      'auth file reload failed, keeping the last good one',
    );
  }
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
export function listenerAddress(app: FastifyInstance, tls: boolean): string {
  return address(app, tls);
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

/** Which of a process's TLS files a reload re-reads. */
export type TlsPart = 'data listener' | 'control listener' | 'upstream CA';

/**
 * Re-reads the TLS files of `parts` (a worker of `serve --workers` follows the data
 * listener's and the upstream CA, its primary the control listener's); logs what changed
 * and each file that could not be used.
 */
export function reloadTls(
  core: ServeCore,
  trigger: ReloadTrigger,
  parts: readonly TlsPart[],
): TlsReloadReport {
  const { tls, lifecycle: log } = core;
  const report: TlsReloadReport = { ok: true, changed: [], errors: [] };
  const prefix = trigger === 'SIGHUP' ? 'SIGHUP: ' : '';
  const all = [
    ['data listener', tls.data],
    ['control listener', tls.control],
    ['upstream CA', tls.upstreamCa],
  ] as const;
  const followed = all.filter(([what, item]) => item !== null && parts.includes(what));
  for (const [what, item] of followed) {
    const result = item!.reload();
    if (result.ok) {
      if (result.changed) report.changed.push(what);
      continue;
    }
    report.ok = false;
    report.errors.push(result.error);
    log.error(
      { tlsReload: { outcome: 'failure', trigger, what, file: result.error.file } },
      `${prefix}TLS reload failed for the ${what}, keeping the files in use: ${result.error.message}`,
    );
  }
  if (report.changed.length > 0) {
    log.info(
      { tlsReload: { outcome: 'success', trigger, changed: report.changed } },
      `${prefix}TLS files reloaded (${report.changed.join(', ')})`,
    );
  } else if (report.ok && followed.length > 0) {
    log.info({ tlsReload: { outcome: 'unchanged', trigger } }, `${prefix}TLS files unchanged`);
  }
  return report;
}
