/**
 * `fencegate serve`: one process running the issuer and the control API on the
 * control listener, and the fencing gateway on the data listener, over one store.
 */
import type { FastifyInstance } from 'fastify';
import { Authenticator } from './auth/authenticate.js';
import { loadAuthFile } from './auth/file.js';
import { ConfigError, DEFAULTS, exposureProblem, type ServeConfig } from './config.js';
import { buildControl, buildProbes } from './control.js';
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
import { CaBundle, ListenerTls, readCertificates, type TlsFileError } from './http/tls.js';
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
    storeCa: config.storeCa === null ? null : readCertificates(config.storeCa, 'store CA'),
  };
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
  const lifecycle = lifecycleLogger(logger);
  const exposed = exposureProblem(config);
  if (exposed !== null) throw new ConfigError(exposed);
  // Read before anything opens: a bad auth file stops the start with its located errors.
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
  // Before anything else: a bad certificate or key stops the start with one line naming the file.
  const tls = openTls(config);
  // A missing default ./policies is fine: a first run needs no policy (the issuer alone is useful).
  const opened = await PolicyHolder.open(config.policies, {
    mayBeMissing: config.policies === DEFAULTS.policies,
  });
  if (!opened.ok) throw new Error(`invalid policies: ${opened.errors.map(formatPolicyError).join('; ')}`);
  const policy = opened.holder;
  if (opened.missing) lifecycle.info(noPolicies(config.policies));

  const metrics = createMetrics();
  const store = instrumentStore(
    await openStore(config.store, {
      allowVolatileRedis: config.allowVolatileRedis,
      ...(config.storeNamespace ? { namespace: config.storeNamespace } : {}),
      ...(tls.storeCa === null ? {} : { tlsCa: tls.storeCa }),
    }),
    metrics,
  );
  const closers: (() => Promise<unknown>)[] = [() => store.close()];
  try {
    const sequencerKeys = await openSequencerKeys(config.sequencerKeys, config.store, (line) =>
      lifecycle.warn(line),
    );
    if (sequencerKeys !== null) {
      sequencerKeys.watch();
      closers.unshift(async () => sequencerKeys.close());
    }
    const owners = new OwnerLookup(store);
    const events = new EventLog({
      log: fencedWriteLog(logger, metrics.logLinesSuppressed),
      owners: (lock, token) => owners.owner(lock, token),
    });
    const breakers = new BreakerBoard();
    const issuer = new Issuer(store, metrics, {
      minTtlMs: config.minTtlMs,
      maxTtlMs: config.maxTtlMs,
      maxWaitMs: config.maxWaitMs,
    });
    let sample: string | null = null;
    if (config.sample) {
      const s = await startSampleUpstream(config.sample);
      closers.unshift(() => s.close());
      sample = s.url;
    }
    const control = await buildControl({
      store,
      issuer,
      metrics,
      events,
      defaultTtlMs: config.defaultTtlMs,
      logger,
      accessLog: config.accessLog > 0,
      policy,
      breakers,
      sequencers: sequencerKeys === null ? null : new SequencerIssuer(sequencerKeys, store),
      tls: tls.control,
      auth,
    });
    closers.unshift(async () => {
      issuer.shutdown();
      await control.close();
    });
    const gateway = await createGateway({
      store,
      policy,
      metrics,
      events,
      logger,
      accessLog: config.accessLog,
      storeBreaker: { timeoutMs: config.storeTimeoutMs, resetTimeoutMs: config.storeResetTimeoutMs },
      session: { ttlMs: config.sessionTtlMs },
      breakers,
      sequencerKeys,
      tls: tls.data,
      upstreamCa: tls.upstreamCa,
    });
    closers.unshift(() => gateway.close());
    let health: FastifyInstance | null = null;
    if (config.health !== null) {
      const probes = await buildProbes({ store, metrics, logger, accessLog: config.accessLog > 0 });
      closers.unshift(() => probes.close());
      await probes.listen({ host: config.health.host, port: config.health.port });
      health = probes;
    }
    await control.listen({ host: config.control.host, port: config.control.port });
    await gateway.listen({ host: config.listen.host, port: config.listen.port });
    const reloaded = (result: ReloadResult, trigger: ReloadTrigger) => {
      metrics.policyReloads.inc({ outcome: result.ok ? 'success' : 'failure' });
      logReload(lifecycle, result, trigger);
      return result;
    };
    policy.watch((result) => reloaded(result, 'watch'));
    closers.unshift(async () => policy.unwatch());
    const spec = redactStoreSpec(config.store);
    lifecycle.info({ store: store.kind, spec }, `store ${store.kind} ${spec}`);
    return {
      data: address(gateway, tls.data !== null),
      control: address(control, tls.control !== null),
      health: health === null ? null : address(health, false),
      sample,
      store,
      metrics,
      policy,
      reload: async (trigger) => reloaded(await policy.reload(), trigger),
      sequencerKeys,
      reloadTls: (trigger) => reloadTls(tls, lifecycle, trigger),
      reloadAuth: () => {
        if (auth === null || config.auth === null) return;
        try {
          const next = loadAuthFile(config.auth);
          auth.replace(next);
          lifecycle.info(
            { auth: { outcome: 'success', principals: next.principals.length } },
            `auth file reloaded (${next.principals.length} principals)`,
          );
        } catch (err) {
          const message = err instanceof Error ? err.message : String(err);
          lifecycle.error(
            { auth: { outcome: 'failure', errors: message.split('\n') } },
            'auth file reload failed, keeping the last good one',
          );
        }
      },
      close: () => runClosers(closers),
    };
  } catch (err) {
    await runClosers(closers);
    throw err;
  }
}

/** Re-reads every TLS file this process follows; logs what changed and each file that could not be used. */
function reloadTls(tls: ReturnType<typeof openTls>, log: Logger, trigger: ReloadTrigger): TlsReloadReport {
  const report: TlsReloadReport = { ok: true, changed: [], errors: [] };
  const prefix = trigger === 'SIGHUP' ? 'SIGHUP: ' : '';
  for (const [what, item] of [
    ['data listener', tls.data],
    ['control listener', tls.control],
    ['upstream CA', tls.upstreamCa],
  ] as const) {
    if (item === null) continue;
    const result = item.reload();
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
  const followed = [tls.data, tls.control, tls.upstreamCa].some((item) => item !== null);
  if (report.changed.length > 0) {
    log.info(
      { tlsReload: { outcome: 'success', trigger, changed: report.changed } },
      `${prefix}TLS files reloaded (${report.changed.join(', ')})`,
    );
  } else if (report.ok && followed) {
    log.info({ tlsReload: { outcome: 'unchanged', trigger } }, `${prefix}TLS files unchanged`);
  }
  return report;
}

/** The start-up line when the default policy directory does not exist. */
export function noPolicies(path: string): string {
  return (
    `no policies: ${path} does not exist, so no routes are proxied (the data listener answers 404 ` +
    'to every request); the lock issuer runs. Create it (fencegate init) and send SIGHUP, or restart.'
  );
}

async function runClosers(closers: (() => Promise<unknown>)[]): Promise<void> {
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
