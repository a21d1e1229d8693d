/**
 * The primary of `fencegate serve --workers N` (docs/adr/0008-workers.md): it runs the
 * control plane (issuer, control listener, event log, /metrics) over its own store
 * connection and forks N workers that share the data listener (node:cluster,
 * round-robin). It stays light: no request of the data plane is handled here, only
 * connections handed to the workers, their events, and the merging of their metrics.
 *
 * - A worker that dies is started again in its slot after a backoff (100 ms, doubling
 *   up to 30 s while it keeps dying young), logged and counted
 *   (fencegate_worker_restarts_total). Its gateway session lapses in the store as a
 *   crashed gateway's does (ADR 0005); nothing else is needed.
 * - Reload (policy file change, SIGHUP): the primary reloads and validates; when the
 *   policy is good, every worker reloads it too. The sequencer key file (its change, or
 *   SIGHUP) is reloaded by every worker, then by the primary.
 * - close() (SIGTERM): every worker drains as a single process does (its data listener
 *   closes, in-flight writes finish, its session ends); the control listener serves
 *   until the last one exited; then the issuer, the control listener and the store close.
 */
import cluster, { type Worker } from 'node:cluster';
import type { ServeConfig } from '../config.js';
import { lifecycleLogger, type Logger } from '../observe/log.js';
import type { ReloadResult } from '../policy/index.js';
import {
  buildControlPlane,
  controlEventLog,
  countedReload,
  listenerAddress,
  logStore,
  openAuth,
  openCore,
  reloadAuth,
  reloadTls,
  runClosers,
  startProbes,
  type ReloadTrigger,
  type ServeCore,
} from '../serve.js';
import { ClusterBreakers } from '../breakers/cluster-board.js';
import { Asker, isToPrimary, WORKER_ROLE_ENV, type ReloadAnswer, type WorkerRole } from './ipc.js';
import { aggregateMetrics, isMetricsSnapshot, retire, type MetricsSnapshot } from './metrics.js';

/** First restart delay; doubled for each death of a worker that had not lived STABLE_MS. */
const RESTART_BASE_MS = 100;
const RESTART_MAX_MS = 30_000;
/** A worker that lived this long before dying is restarted after RESTART_BASE_MS again. */
const STABLE_MS = 30_000;
/** How long a scrape waits for a worker's metrics before using its last answer. */
const SCRAPE_WAIT_MS = 2_000;

export interface RunningPrimary {
  data: string;
  control: string;
  /** The probe listener's URL (--health), or null. */
  health: string | null;
  sample: string | null;
  /** SIGHUP: the policy, the sequencer keys and the TLS files in every process; the auth file in the primary. */
  reload(trigger: ReloadTrigger): Promise<ReloadResult>;
  /** Drains every worker, then closes the control plane; resolves with the exit code. */
  close(): Promise<number>;
}

interface Slot {
  slot: number;
  worker: Worker | null;
  ready: boolean;
  startedAt: number;
  /** Deaths in a row of a worker that had not lived STABLE_MS. */
  failures: number;
  restart: NodeJS.Timeout | null;
  /** The worker's last metrics answer (used when it does not answer a scrape in time). */
  metrics: MetricsSnapshot | null;
  /** Why it could not start, when it said. */
  failure: string | null;
  exited: Promise<number>;
  onExit: (code: number) => void;
}

export async function startPrimary(
  config: Readonly<ServeConfig>,
  logger: Logger,
  count: number,
): Promise<RunningPrimary> {
  const auth = openAuth(config, lifecycleLogger(logger));
  const core = await openCore(config, logger);
  const asker = new Asker();
  const slots: Slot[] = [];
  let stopping = false;
  let data: string | null = null;
  let startFailed: ((err: Error) => void) | null = null;
  let startDone: (() => void) | null = null;

  const ready = () => slots.filter((s) => s.ready && s.worker !== null).map((s) => s.worker as Worker);
  const events = controlEventLog(core);
  const breakers = new ClusterBreakers(ready, (w) => asker.ask(w, 'breakers', SCRAPE_WAIT_MS));
  // The counters and histograms of workers that died, as last scraped: so the sums never go down.
  let retired: Promise<MetricsSnapshot | null> = Promise.resolve(null);
  const scrape = async () => {
    const own = await core.metrics.registry.getMetricsAsJSON();
    const gone = await retired;
    const theirs = await Promise.all(
      slots.map(async (s) => {
        if (s.worker === null || !s.ready) return null;
        const answer = await asker.ask(s.worker, 'metrics', SCRAPE_WAIT_MS);
        if (isMetricsSnapshot(answer)) s.metrics = answer;
        return s.metrics;
      }),
    );
    const all = [own, ...(gone === null ? [] : [gone]), ...theirs];
    return aggregateMetrics(all.filter((m): m is MetricsSnapshot => m !== null));
  };

  const fork = (s: Slot) => {
    s.restart = null;
    s.ready = false;
    s.failure = null;
    s.metrics = null;
    s.startedAt = performance.now();
    s.exited = new Promise((resolve) => (s.onExit = resolve));
    const role: WorkerRole = { slot: s.slot, config: config as ServeConfig };
    const worker = cluster.fork({ [WORKER_ROLE_ENV]: JSON.stringify(role) });
    s.worker = worker;
    worker.on('message', (m: unknown) => {
      if (!isToPrimary(m)) return;
      switch (m.fg) {
        case 'ready':
          s.ready = true;
          data ??= m.data;
          if (startDone === null)
            core.lifecycle.info(
              { slot: s.slot, workerPid: worker.process.pid },
              `worker ${s.slot} started again`,
            );
          else if (slots.every((x) => x.ready)) startDone();
          break;
        case 'failed':
          s.failure = m.message;
          break;
        case 'events':
          for (const e of m.events) events.record(e);
          break;
        case 'answer':
          asker.answered(m.id, m.value);
          break;
      }
    });
    worker.on('exit', (code: number | null, signal: string | null) => {
      asker.forget(worker);
      s.worker = null;
      s.ready = false;
      if (s.metrics !== null) retired = retire(retired, s.metrics);
      s.metrics = null;
      s.onExit(code ?? 1);
      if (stopping) return;
      const how = signal !== null ? `signal ${signal}` : `code ${String(code)}`;
      if (startFailed !== null) {
        startFailed(new Error(s.failure ?? `worker ${s.slot} exited with ${how} while starting`));
        return;
      }
      s.failures = performance.now() - s.startedAt >= STABLE_MS ? 1 : s.failures + 1;
      const delay = Math.min(RESTART_MAX_MS, RESTART_BASE_MS * 2 ** (s.failures - 1));
      core.metrics.workerRestarts.inc();
      core.lifecycle.error(
        { slot: s.slot, workerPid: worker.process.pid, code, signal, restartInMs: delay, reason: s.failure },
        `worker ${s.slot} exited with ${how}${s.failure ? ` (${s.failure})` : ''}; starting it again in ${delay} ms`,
      );
      s.restart = setTimeout(() => fork(s), delay);
    });
  };

  const stopWorkers = async (): Promise<number> => {
    stopping = true;
    const draining: Promise<number>[] = [];
    for (const s of slots) {
      if (s.restart !== null) clearTimeout(s.restart);
      s.restart = null;
      const worker = s.worker;
      if (worker === null) continue;
      if (s.ready) {
        draining.push(s.exited);
        worker.send({ fg: 'shutdown' }, (err: Error | null) => {
          if (err) worker.process.kill('SIGTERM');
        });
      } else {
        // Still starting (it listens for no message yet) and serving nothing: stopped by signal.
        worker.process.kill('SIGTERM');
        await s.exited;
      }
    }
    const codes = await Promise.all(draining);
    return codes.every((c) => c === 0) ? 0 : 1;
  };

  try {
    const workers = () => ({ ready: ready().length, configured: count });
    const { control, sample } = await buildControlPlane(core, events, breakers, { scrape, workers, auth });
    const health = await startProbes(core, { scrape, workers });
    await control.listen({ host: config.control.host, port: config.control.port });
    // Round-robin: the primary accepts and hands connections to the workers in turn (the
    // default on Linux, set here so that NODE_CLUSTER_SCHED_POLICY cannot change it).
    cluster.schedulingPolicy = cluster.SCHED_RR;
    // Until the first worker is ready /readyz answers 503: say why, and when it ends.
    core.lifecycle.info(
      { workers: count },
      `waiting for ${count} workers to start (/readyz answers 503 until one serves the data listener)`,
    );
    await new Promise<void>((resolve, reject) => {
      startDone = resolve;
      startFailed = reject;
      for (let i = 1; i <= count; i++) {
        const s = { slot: i, failures: 0, restart: null, metrics: null, failure: null } as unknown as Slot;
        slots.push(s);
        fork(s);
      }
    }).finally(() => {
      startDone = null;
      startFailed = null;
    });

    const reloaded = countedReload(core);
    const reloadWorkers = async () => {
      await Promise.all(
        ready().map(async (w) => {
          const answer = (await asker.ask(w, 'reload', 30_000)) as ReloadAnswer | undefined;
          if (answer?.policy === true) return;
          const slot = slots.find((s) => s.worker === w)?.slot;
          core.lifecycle.error(
            { slot, errors: answer?.errors ?? [] },
            `worker ${String(slot)} did not reload the policy${answer ? '' : ' (no answer)'}; it serves its last good policy`,
          );
        }),
      );
    };
    // Keys: the workers first, then the primary, so that what GET /v1/keys publishes (and
    // what the issuer signs with) is what every worker verifies with.
    const keys = core.sequencerKeys;
    const reloadKeys = async () => {
      await Promise.all(ready().map((w) => asker.ask(w, 'reload-keys', 30_000)));
      await keys?.reload();
    };
    if (keys !== null) {
      keys.close();
      keys.watch(undefined, reloadKeys);
    }
    // A reload is counted and logged once every worker has it: "policies reloaded" then
    // means the new policy is what every process serves.
    core.policy.watch((result) => {
      if (result.ok) void reloadWorkers().then(() => reloaded(result, 'watch'));
      else reloaded(result, 'watch');
    });
    core.closers.unshift(async () => core.policy.unwatch());
    logStore(core);
    core.lifecycle.info({ workers: count }, `workers ready: ${count} processes share the data listener`);
    return {
      data: data ?? 'unknown',
      control: listenerAddress(control, core.tls.control !== null),
      health: health === null ? null : listenerAddress(health, false),
      sample,
      async reload(trigger) {
        void reloadKeys();
        reloadTls(core, trigger, ['control listener']);
        void Promise.all(ready().map((w) => asker.ask(w, 'reload-tls', 30_000)));
        reloadAuth(auth, core);
        const result = await core.policy.reload();
        if (result.ok) await reloadWorkers();
        return reloaded(result, trigger);
      },
      async close() {
        core.policy.unwatch();
        const code = await stopWorkers();
        await runClosers(core.closers);
        return code;
      },
    };
  } catch (err) {
    await stopWorkers();
    await runClosers(core.closers);
    throw err;
  }
}

export type { ServeCore };
