/**
 * `fencegate serve`: one process running the issuer and the control API on the
 * control listener, and the fencing gateway on the data listener, over one store.
 */
import type { FastifyInstance } from 'fastify';
import type { ServeConfig } from './config.js';
import { buildControl } from './control.js';
import { Issuer } from './issuer/service.js';
import { EventLog } from './observe/events.js';
import { createMetrics } from './observe/metrics.js';
import type { Metrics } from './observe/metrics.js';
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
  /** The sequencer key file this process follows (null: sequencers off). */
  sequencerKeys: KeyRing | null;
  close(): Promise<void>;
}

export type Log = (line: string) => void;

function address(app: FastifyInstance): string {
  const a = app.server.address();
  if (a === null || typeof a === 'string') return String(a);
  const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
  return `http://${host}:${a.port}`;
}

export async function startServer(
  config: Readonly<ServeConfig>,
  log: Log = () => {},
): Promise<RunningServer> {
  const opened = await PolicyHolder.open(config.policies);
  if (!opened.ok) throw new Error(`invalid policies: ${opened.errors.map(formatPolicyError).join('; ')}`);
  const policy = opened.holder;

  const store = await openStore(config.store, {
    allowVolatileRedis: config.allowVolatileRedis,
    ...(config.storeNamespace ? { namespace: config.storeNamespace } : {}),
  });
  const closers: (() => Promise<unknown>)[] = [() => store.close()];
  try {
    const sequencerKeys = await openSequencerKeys(config.sequencerKeys, config.store, log);
    if (sequencerKeys !== null) {
      sequencerKeys.watch();
      closers.unshift(async () => sequencerKeys.close());
    }
    const metrics = createMetrics();
    const events = new EventLog({ log: (e) => log(`fenced ${JSON.stringify(e)}`) });
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
      logLevel: config.logLevel,
      sequencers: sequencerKeys === null ? null : new SequencerIssuer(sequencerKeys, store),
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
      logLevel: config.logLevel,
      storeBreaker: { timeoutMs: config.storeTimeoutMs, resetTimeoutMs: config.storeResetTimeoutMs },
      session: { ttlMs: config.sessionTtlMs },
      sequencerKeys,
    });
    closers.unshift(() => gateway.close());
    await control.listen({ host: config.control.host, port: config.control.port });
    await gateway.listen({ host: config.listen.host, port: config.listen.port });
    policy.watch((result) => log(describeReload(result)));
    closers.unshift(async () => policy.unwatch());
    log(`store ${store.kind} ${redactStoreSpec(config.store)}`);
    return {
      data: address(gateway),
      control: address(control),
      sample,
      store,
      metrics,
      policy,
      sequencerKeys,
      close: () => runClosers(closers),
    };
  } catch (err) {
    await runClosers(closers);
    throw err;
  }
}

async function runClosers(closers: (() => Promise<unknown>)[]): Promise<void> {
  for (const c of closers.splice(0)) await c().catch(() => undefined);
}

export function describeReload(result: ReloadResult): string {
  return result.ok
    ? `policies reloaded (${result.policy.routes.length} routes)`
    : `policy reload failed, keeping the last good policy:\n${result.errors.map(formatPolicyError).join('\n')}`;
}
