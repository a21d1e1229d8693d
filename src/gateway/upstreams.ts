/**
 * Upstream connections: one undici Pool and one circuit breaker (breaker.ts) per
 * upstream, shared by all requests. reply-from is given `dispatcher` as its undici
 * instance; each forwarded request carries its ForwardScope on the request headers
 * under a private symbol (attachScope; reply-from copies the headers with
 * Object.assign, which keeps symbol keys, and undici only reads string keys). The
 * scope tells the dispatcher which upstream the request is for and lets it report
 * exactly when the upstream request started and settled (answer, error or timeout) —
 * the moment the request's in-flight fence entry can be finished.
 *
 * (An AsyncLocalStorage did this before; merely having one active makes Node run
 * promise hooks for every promise in the process, a measurable cost per request.)
 */
import { isIP } from 'node:net';
import { rootCertificates } from 'node:tls';
import { Breaker } from './breaker.js';
import { Pool, type Dispatcher } from 'undici';
import type { CaBundle } from '../http/tls.js';
import { GuardedHandler, type ForwardGuard } from './forward-guard.js';
import type { BreakerBoard } from '../observe/breakers.js';
import type { Metrics } from '../observe/metrics.js';
import type { CompiledPolicy, CompiledUpstream } from '../policy/index.js';
import { isUpstreamFailure } from './upstream-errors.js';

export interface ForwardScope {
  upstream: CompiledUpstream;
  /** Refuses the request right before it is written if it must not be sent; bounds it. */
  guard: ForwardGuard;
  /** The request is about to be sent to the upstream. */
  started(): void;
  /** The upstream answered (headers received), failed, or timed out. Called once. */
  settled(): void;
  /** True when the client went away (its errors do not count against the upstream). */
  clientGone(): boolean;
}

type RequestOptions = Dispatcher.RequestOptions;
type ResponseData = Dispatcher.ResponseData;
type Callback = (err: Error | null, data?: ResponseData) => void;

/** undici's request() (the same function on every dispatcher), called with our own dispatch. */
const undiciRequest = Pool.prototype.request as unknown as (
  this: { dispatch(opts: unknown, handler: never): boolean },
  opts: RequestOptions,
) => Promise<ResponseData>;

/**
 * The guard of the request being dispatched. undici's request() calls `dispatch`
 * synchronously, so the slot is set right around that call and read inside it. (A symbol
 * key on the request options turned them into a slow-properties object that undici's
 * constructors then read field by field: measured ~10 % of the proxy's throughput.)
 */
let dispatching: ForwardGuard | null = null;

/**
 * What undici's request() dispatches through for one upstream: the pool, with each
 * request's handler wrapped by its guard (see GuardedHandler). One per upstream client,
 * not per request.
 */
function guardedTarget(agent: Pool) {
  return {
    dispatch: (opts: unknown, handler: never) => {
      const guard = dispatching;
      if (guard === null) throw new Error('an upstream request dispatched outside guardedRequest');
      return agent.dispatch(opts as Dispatcher.DispatchOptions, new GuardedHandler(guard, handler) as never);
    },
  };
}

function guardedRequest(client: Client, guard: ForwardGuard, request: RequestOptions): Promise<ResponseData> {
  dispatching = guard;
  try {
    return undiciRequest.call(client.target, request);
  } finally {
    dispatching = null;
  }
}

interface Client {
  signature: string;
  /** The --upstream-ca version its connections were built with. */
  caVersion: number;
  /** https: the name the upstream's certificate must carry (null: its IP address is checked). */
  servername: string | null;
  agent: Pool;
  target: ReturnType<typeof guardedTarget>;
  breaker: Breaker;
  /** Removes the breaker from the board. */
  unlist: () => void;
}

export interface UpstreamLog {
  warn(obj: object, msg: string): void;
}

const SCOPE = Symbol('fencegate.forwardScope');

type ScopedHeaders = Record<string | symbol, unknown>;

/** Attaches `forward` to the upstream request headers (under a symbol, never sent). */
export function attachScope<H extends object>(headers: H, forward: ForwardScope): H {
  (headers as ScopedHeaders)[SCOPE] = forward;
  return headers;
}

/** Pool settings: as @fastify/reply-from's own default undici pool (the bare proxy's). */
const POOL_OPTIONS = { connections: 128, pipelining: 1, keepAliveTimeout: 4_000 } as const;

/** signatureOf, computed once per compiled upstream (they are immutable). */
const signatures = new WeakMap<CompiledUpstream, string>();

export class UpstreamPool {
  private readonly clients = new Map<string, Client>();
  /** Upstreams whose breaker state series exist (fencegate_breaker_state). */
  private readonly seeded = new Set<string>();

  /** The `undici` option for @fastify/reply-from. */
  readonly dispatcher = { request: (opts: RequestOptions, cb: Callback) => this.dispatch(opts, cb) };

  constructor(
    private readonly metrics: Metrics,
    private readonly log: UpstreamLog,
    /** Where each upstream's breaker is listed for GET /v1/status, if anywhere. */
    private readonly board: BreakerBoard | null = null,
    /** --upstream-ca: trusted besides the built-in roots by https upstreams without their own `tls.ca`. */
    private readonly upstreamCa: CaBundle | null = null,
  ) {}

  /** Seconds until the upstream's open circuit lets a trial request through. */
  retryAfterSeconds(upstream: CompiledUpstream): number {
    return this.clients.get(upstream.name)?.breaker.retryAfterSeconds() ?? 1;
  }

  /** Drops (and gracefully closes) clients of upstreams that are gone or changed in `policy`. */
  retain(policy: CompiledPolicy): void {
    for (const [name, client] of this.clients) {
      const upstream = Object.hasOwn(policy.upstreams, name) ? policy.upstreams[name] : undefined;
      if (upstream === undefined || signatureOf(upstream) !== client.signature) void this.drop(name, client);
    }
    for (const name of this.seeded) {
      if (!Object.hasOwn(policy.upstreams, name)) {
        this.seeded.delete(name);
        this.metrics.dropBreaker(name);
      }
    }
  }

  /**
   * Makes the breaker state of `kind`'s upstreams in `policy` visible from the start
   * (closed until a client exists: no circuit has opened). Called by the kinds that
   * forward through this pool.
   */
  seed(policy: CompiledPolicy, kind: string): void {
    for (const upstream of Object.values(policy.upstreams)) {
      if (upstream.kind !== kind || this.seeded.has(upstream.name)) continue;
      this.seeded.add(upstream.name);
      if (!this.clients.has(upstream.name)) this.metrics.setBreakerState(upstream.name, 'closed');
    }
  }

  async close(): Promise<void> {
    const closing = [...this.clients.entries()].map(([name, client]) => this.drop(name, client));
    await Promise.all(closing);
  }

  private dispatch(opts: RequestOptions, cb: Callback): void {
    const headers = opts.headers as ScopedHeaders | undefined;
    const forward = headers?.[SCOPE] as ForwardScope | undefined;
    if (forward === undefined) {
      cb(new Error('upstream request outside a forward scope'));
      return;
    }
    delete headers?.[SCOPE];
    const { upstream } = forward;
    const client = this.client(upstream);
    const started = performance.now();
    const { metrics } = this;
    // statusClass: 1–5 for 1xx–5xx, 0 for no answer (fencegate_upstream_request_duration_seconds).
    const observe = (statusClass: number) =>
      metrics.upstreamTiming(upstream.name, statusClass).observe((performance.now() - started) / 1000);
    forward.started();
    const { guard } = forward;
    const request = {
      ...opts,
      body: guard.guardBody(opts.body) as RequestOptions['body'],
      headersTimeout: upstream.timeoutMs,
      bodyTimeout: upstream.timeoutMs,
      // undici would take the name to verify (and SNI) from the Host header, which an s3
      // upstream gets as the client sent it: the upstream's own name is what is checked.
      ...(client.servername === null ? {} : { servername: client.servername }),
    };
    // true = "not a failure": client-side errors never open the upstream's circuit.
    const excused = (err: unknown) => forward.clientGone() || !isUpstreamFailure(err);
    client.breaker
      .fire(() => guardedRequest(client, guard, request), excused)
      .then(
        (res) => {
          observe(Math.floor(res.statusCode / 100));
          forward.settled();
          // When the client has already gone, reply-from destroys this body without an error
          // listener, and undici's body then emits RequestAbortedError: unhandled, it would
          // crash the process. Whoever pipes the body adds its own listeners; this one only
          // keeps an abandoned body's error from being fatal.
          res.body.on('error', ignoreAbandonedBodyError);
          cb(null, res);
        },
        (err: Error) => {
          observe(0);
          forward.settled();
          cb(err);
        },
      );
  }

  private client(upstream: CompiledUpstream): Client {
    const signature = signatureOf(upstream);
    const existing = this.clients.get(upstream.name);
    const caVersion = this.upstreamCa?.version ?? 0;
    if (existing !== undefined && existing.signature === signature && existing.caVersion === caVersion)
      return existing;
    if (existing !== undefined) void this.drop(upstream.name, existing);
    const connect = connectOptions(upstream, this.upstreamCa);
    const agent = new Pool(upstream.origin, connect === null ? POOL_OPTIONS : { ...POOL_OPTIONS, connect });
    const { breaker: settings } = upstream;
    const breaker = new Breaker({
      timeoutMs: false,
      errorThresholdPercentage: settings.errorThresholdPercentage,
      volumeThreshold: settings.volumeThreshold,
      resetTimeoutMs: settings.resetTimeoutMs,
      rollingWindowMs: settings.rollingWindowMs,
      onOpen: () =>
        this.log.warn(
          { upstream: upstream.name },
          'upstream circuit opened: requests get 502 until it recovers',
        ),
      onClose: () => this.log.warn({ upstream: upstream.name }, 'upstream circuit closed'),
      onState: (state) => this.metrics.setBreakerState(upstream.name, state),
    });
    this.seeded.add(upstream.name);
    const unlist = this.board?.setUpstream(upstream.name, () => breaker.state) ?? (() => undefined);
    const client = {
      signature,
      caVersion,
      servername: serverNameOf(upstream),
      agent,
      target: guardedTarget(agent),
      breaker,
      unlist,
    };
    this.clients.set(upstream.name, client);
    return client;
  }

  private async drop(name: string, client: Client): Promise<void> {
    if (this.clients.get(name) === client) this.clients.delete(name);
    client.unlist();
    client.breaker.shutdown();
    await client.agent.close().catch(() => undefined);
  }
}

function signatureOf(upstream: CompiledUpstream): string {
  let signature = signatures.get(upstream);
  if (signature === undefined) {
    signature = JSON.stringify([upstream.origin, upstream.timeoutMs, upstream.breaker, upstream.tls?.digest]);
    signatures.set(upstream, signature);
  }
  return signature;
}

/**
 * TLS options for an https upstream's connections: its own `tls` from the policy (its CA
 * alone is trusted), else --upstream-ca added to the built-in roots; null: Node's defaults.
 */
function connectOptions(upstream: CompiledUpstream, upstreamCa: CaBundle | null): object | null {
  if (!upstream.origin.startsWith('https:')) return null;
  const tls = upstream.tls;
  const ca = tls?.ca ?? (upstreamCa === null ? null : [...rootCertificates, ...upstreamCa.certs]);
  const options = {
    ...(ca === null ? {} : { ca: [...ca] }),
    ...(tls?.cert == null || tls.key === null ? {} : { cert: tls.cert, key: tls.key }),
  };
  return Object.keys(options).length === 0 ? null : options;
}

/** `tls.serverName`, else the URL's host name (not an IP address: SNI carries names only). */
function serverNameOf(upstream: CompiledUpstream): string | null {
  if (!upstream.origin.startsWith('https:')) return null;
  if (upstream.tls?.serverName != null) return upstream.tls.serverName;
  const host = new URL(upstream.origin).hostname;
  return isIP(host.replace(/^\[|\]$/g, '')) === 0 ? host : null;
}

function ignoreAbandonedBodyError(): void {}
