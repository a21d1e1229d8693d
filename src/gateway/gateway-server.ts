/**
 * The data listener: a fastify instance (not yet listening) whose requests the data
 * plane serves (data-plane.ts): routed by the current policy, fenced when their route
 * is, and served by their upstream's kind.
 */
import type { Server as TlsServer } from 'node:tls';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { BreakerBoard } from '../breakers/board.js';
import type { EventLog } from '../observe/events.js';
import { seedPolicy, type Metrics } from '../observe/metrics.js';
import { instrumentStore } from '../observe/store-metrics.js';
import { AccessRecorder } from './access.js';
import type { PolicyHolder } from '../policy/index.js';
import type { Store } from '../store/types.js';
import { SequencerVerifier, storeAudience, type KeyRing } from '../sequencer/index.js';
import { deferContinue } from '../http/continue.js';
import { httpsOption, type CaBundle, type ListenerTls } from '../http/tls.js';
import { DataPlane, installDataPlane } from './data-plane.js';
import { Idempotency } from './idempotency.js';
import { Fence } from './fence.js';
import { ResetHold } from './reset-hold.js';
import { ADMISSION_HOLD_MS } from './admission-hold.js';
import { SessionObserver } from './observer.js';
import { GatewaySessions, type SessionSettings } from './session.js';
import {
  clientErrorProblem,
  errorHandler,
  HTTP_SERVER_OPTIONS,
  refuseTunnels,
  refuseUnknownExpectations,
} from '../http/problems.js';
import { refusalRecorder } from './refusal-log.js';
import { KindRuntimes } from './runtimes.js';
import { StoreGuard, type StoreGuardOptions } from './store-guard.js';
import { UpstreamPool } from './upstreams.js';

export interface GatewayOptions {
  store: Store;
  policy: PolicyHolder;
  metrics: Metrics;
  events: EventLog;
  /**
   * A pino logger (the process's root logger); the listener logs through a child of it
   * bound to `listener: "data"`. When absent, fastify's own logger at `logLevel` (default: off).
   */
  logger?: FastifyBaseLogger;
  logLevel?: string;
  /** Share of requests written to the access log at info: 0 (off, the default here) to 1 (all). */
  accessLog?: number;
  /** Trust X-Forwarded-* from the peer (the gateway runs behind a load balancer). Default false. */
  trustProxy?: boolean;
  /** Circuit breaker around store calls on the request path. */
  storeBreaker?: StoreGuardOptions;
  /** This process's gateway session (docs/adr/0005-gateway-sessions.md). */
  session?: SessionSettings;
  /** How long one store admission serves the same token's next writes (docs/adr/0016-admission-holds.md). Default 50; 0: off. */
  admissionHoldMs?: number;
  /** Where the store's and the upstreams' circuit breakers are listed (GET /v1/status). */
  breakers?: BreakerBoard;
  /** The issuer's sequencer keys (`check: sequencer` routes); null or absent: every sequencer is refused. */
  sequencerKeys?: KeyRing | null;
  /** The store namespace sequencers must carry (--store-namespace); absent: the store's default. */
  storeNamespace?: string | null;
  /** TLS (and mTLS) for the listener; null or absent: plain HTTP. */
  tls?: ListenerTls | null;
  /** --upstream-ca: trusted besides the built-in roots by https upstreams without their own `tls.ca`. */
  upstreamCa?: CaBundle | null;
  /** Answer refusals that need no waiting below node:http (src/http/lane.ts). Default true. */
  refusalLane?: boolean;
}

export async function createGateway(opts: GatewayOptions): Promise<FastifyInstance> {
  const trustProxy = opts.trustProxy ?? false;
  const app = dataListener(opts, trustProxy);
  const store = instrumentStore(opts.store, opts.metrics);
  const sessions = new GatewaySessions(store, opts.metrics, app.log, opts.session);
  const guard = new StoreGuard(store, opts.metrics, app.log, opts.storeBreaker, (lock, requestId) =>
    sessions.finishLater(lock, requestId),
  );
  opts.breakers?.setStore(() => guard.breakerState);
  const observer = new SessionObserver(guard, app.log);
  const sequencers = await sequencerVerifier(opts, store, sessions, app);
  const untrack = trackSizes(opts.metrics, sessions, observer, sequencers);
  const resetHold = new ResetHold(opts.metrics, app.log);
  const unwatchResets = store.onReset((reset) => resetHold.reset(reset.reason));
  const unwatchLoss = sessions.onStoreLoss((reason) => resetHold.reset(reason));
  await sessions.start();
  observer.startSweeping(Math.max(100, Math.floor(sessions.ttlMs / 2)));
  const pool = new UpstreamPool(opts.metrics, app.log, opts.breakers ?? null, opts.upstreamCa ?? null);
  seedPolicy(opts.metrics, opts.policy.current);
  const unsubscribe = opts.policy.subscribe((policy) => {
    pool.retain(policy);
    seedPolicy(opts.metrics, policy);
  });
  app.addHook('onClose', async () => {
    unsubscribe();
    unwatchResets();
    unwatchLoss();
    untrack();
    observer.stop();
    await pool.close();
    await sessions.close();
    guard.shutdown();
  });
  const fence = new Fence({
    guard,
    sessions,
    observer,
    metrics: opts.metrics,
    events: opts.events,
    sequencers,
    admissionHoldMs: opts.admissionHoldMs ?? ADMISSION_HOLD_MS,
    resetHold,
  });
  const refused = refusalRecorder(opts.metrics, opts.events);
  const runtimes = new KindRuntimes({ log: app.log, metrics: opts.metrics, pool, refused }, opts.policy);
  app.addHook('onClose', () => runtimes.close());
  const idempotency = new Idempotency(store, opts.metrics);
  const access = new AccessRecorder(opts.metrics, opts.accessLog ?? 0, app.log);
  installDataPlane(
    app,
    new DataPlane({ policy: opts.policy, fence, idempotency, runtimes, access, log: app.log, trustProxy }),
    { lane: opts.refusalLane ?? true },
  );
  return app;
}

/**
 * The sequencer verifier (null without keys): expiry judged on the store's clock,
 * estimated from the session's beats; namespace and epoch those of this store.
 */
async function sequencerVerifier(
  opts: GatewayOptions,
  store: Store,
  sessions: GatewaySessions,
  app: FastifyInstance,
): Promise<SequencerVerifier | null> {
  if (opts.sequencerKeys == null) return null;
  const audience = await storeAudience(store, opts.storeNamespace);
  app.addHook('onClose', async () => audience.close());
  return new SequencerVerifier(opts.sequencerKeys, () => sessions.storeTime() ?? Date.now(), audience);
}

/** Gauges of the per-lock structures the gateway keeps beside the fence (fencegate_tracked_locks); returns their removal. */
function trackSizes(
  metrics: Metrics,
  sessions: GatewaySessions,
  observer: SessionObserver,
  sequencers: SequencerVerifier | null,
): () => void {
  const stops = [
    metrics.trackSize('unfinished-finishes', () => sessions.unfinishedCount),
    metrics.trackSize('gone-sessions', () => observer.goneCount),
  ];
  if (sequencers !== null) stops.push(metrics.trackSize('sequencer-cache', () => sequencers.cached));
  return () => {
    for (const stop of stops) stop();
  };
}

/** The fastify instance the data listener runs on, with its TLS, logging and 100 Continue handling. */
function dataListener(opts: GatewayOptions, trustProxy: boolean): FastifyInstance {
  const loggerOption =
    opts.logger !== undefined
      ? { loggerInstance: opts.logger.child({ listener: 'data' }) }
      : {
          logger:
            opts.logLevel !== undefined && opts.logLevel !== 'silent'
              ? { level: opts.logLevel, base: { listener: 'data' } }
              : false,
        };
  const app = Fastify({
    ...loggerOption,
    trustProxy,
    // The data plane counts and logs answered requests itself (access.ts).
    logController: new LogController({ disableRequestLogging: true }),
    // Uploads stream through for as long as they take; upstream timeouts bound the wait for answers.
    requestTimeout: 0,
    return503OnClosing: true,
    // Requests fastify serves itself (inject(), see data-plane.ts) whose URL its router cannot decode.
    frameworkErrors: (error, request, reply) => errorHandler(error, request, reply),
    clientErrorHandler: clientErrorProblem,
    http: HTTP_SERVER_OPTIONS,
    ...httpsOption(opts.tls),
  }) as unknown as FastifyInstance;

  // 100 Continue is sent by the forward step once the fence admitted the request, not on arrival.
  opts.tls?.attach(app.server as unknown as TlsServer, app.log);
  deferContinue(app.server);
  refuseUnknownExpectations(app.server);
  refuseTunnels(app.server);
  return app;
}
