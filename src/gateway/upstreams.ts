/**
 * Upstream connections: one undici Pool and one circuit breaker (src/breakers/circuit.ts) per
 * upstream, shared by all requests. `forward` dispatches one request on its upstream's
 * pool, its handler wrapped by the request's ForwardGuard (GuardedHandler), and hands
 * the answer to the caller's sink as undici delivers it: no response stream, no promise
 * per chunk. The scope reports exactly when the upstream request started and settled
 * (answer headers, error or timeout): the moment the request's in-flight fence entry
 * can be finished.
 */
import { isIP } from 'node:net';
import { rootCertificates } from 'node:tls';
import { Breaker } from '../breakers/circuit.js';
import { Pool, type Dispatcher } from 'undici';
import type { CaBundle } from '../http/tls.js';
import { GuardedHandler, type ForwardGuard, type LegacyHandler } from './forward-guard.js';
import type { BreakerBoard } from '../breakers/board.js';
import type { Metrics } from '../observe/metrics.js';
import type { CompiledPolicy, CompiledUpstream } from '../policy/index.js';
import { isUpstreamFailure, upstreamProblem } from './upstream-errors.js';

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

/** The request as it goes to the upstream (path with query, headers already rewritten). */
export interface UpstreamRequest {
  method: string;
  path: string;
  headers: Record<string, string | string[]>;
  /** The client's body stream, or its bytes when the gateway read it whole (null: none). */
  body: NodeJS.ReadableStream | Buffer | null;
}

/**
 * Where the answer goes. `onHeaders` gets the final answer (1xx interim ones are not passed
 * on), then `onData` chunks (false: pause until `resume`), then `onComplete`. `failed` is
 * called instead when there is no answer (refused, unreachable, timed out, cut, circuit
 * open), `onError` when the answer breaks off after its headers.
 */
export interface UpstreamSink {
  /** undici is about to write the request; `abort` cancels it (and its answer) from now on. */
  onStart(abort: (err?: Error) => void): void;
  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean;
  onData(chunk: Buffer): boolean;
  onComplete(): void;
  onError(err: Error): void;
  failed(err: Error): void;
}

interface Client {
  signature: string;
  /** The --upstream-ca version its connections were built with. */
  caVersion: number;
  /** https: the name the upstream's certificate must carry (null: its IP address is checked). */
  servername: string | null;
  agent: Pool;
  breaker: Breaker;
  /** Removes the breaker from the board. */
  unlist: () => void;
}

export interface UpstreamLog {
  warn(obj: object, msg: string): void;
}

/** Pool settings: as @fastify/reply-from's own default undici pool (the bare proxy's). */
const POOL_OPTIONS = { connections: 128, pipelining: 1, keepAliveTimeout: 4_000 } as const;

/** signatureOf, computed once per compiled upstream (they are immutable). */
const signatures = new WeakMap<CompiledUpstream, string>();

export class UpstreamPool {
  private readonly clients = new Map<string, Client>();
  /** Upstreams whose breaker state series exist (fencegate_breaker_state). */
  private readonly seeded = new Set<string>();

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
        this.board?.stats.drop(name);
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

  /**
   * Sends `request` to the scope's upstream through its circuit breaker; the answer goes
   * to `sink`. Never throws: every failure reaches `sink.failed` (or `sink.onError`).
   */
  forward(scope: ForwardScope, request: UpstreamRequest, sink: UpstreamSink): void {
    const { upstream, guard } = scope;
    const client = this.client(upstream);
    const started = performance.now();
    const { metrics } = this;
    scope.started();
    const options: Dispatcher.DispatchOptions = {
      origin: upstream.origin,
      path: request.path,
      method: request.method as Dispatcher.HttpMethod,
      headers: request.headers,
      body: guard.guardBody(request.body) as Dispatcher.DispatchOptions['body'],
      headersTimeout: upstream.timeoutMs,
      bodyTimeout: upstream.timeoutMs,
      // undici would take the name to verify (and SNI) from the Host header, which an s3
      // upstream gets as the client sent it: the upstream's own name is what is checked.
      ...(client.servername === null ? {} : { servername: client.servername }),
    };
    // statusClass: 1–5 for 1xx–5xx, 0 for no answer (fencegate_upstream_request_duration_seconds).
    const answered = (statusCode: number) => {
      const ms = performance.now() - started;
      metrics.upstreamTiming(upstream.name, Math.floor(statusCode / 100)).observe(ms / 1000);
      this.board?.stats.record(upstream.name, statusCode, ms);
      scope.settled();
    };
    // true = "not a failure": client-side errors never open the upstream's circuit.
    const excused = (err: unknown) => scope.clientGone() || !isUpstreamFailure(err);
    client.breaker
      .fire(
        () =>
          new Promise<void>((resolve, reject) => {
            const handler = new AnswerHandler(sink, answered, resolve, reject);
            client.agent.dispatch(options, new GuardedHandler(guard, handler) as never);
          }),
        excused,
      )
      .catch((err: Error) => {
        const ms = performance.now() - started;
        metrics.upstreamTiming(upstream.name, 0).observe(ms / 1000);
        this.noteFailure(upstream.name, err, ms, scope.clientGone());
        scope.settled();
        sink.failed(err);
      });
  }

  /** A request without an answer, on the board (GET /v1/upstreams): what the client got and why. */
  private noteFailure(name: string, err: Error, ms: number, clientGone: boolean): void {
    if (this.board === null || clientGone) return;
    const problem = upstreamProblem(err, name, 1);
    // A cut that is the client's doing (a body too slow, too long) is no upstream error.
    if (problem.status < 500) this.board.stats.record(name, problem.status, ms);
    else this.board.stats.record(name, 0, ms, { status: problem.status, message: problem.message });
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

/**
 * undici's handler for one forward: settles the breaker's promise when the final answer's
 * headers arrive (resolved) or when there is none (rejected), and passes the answer on.
 * An error after the headers is the sink's alone (the upstream did answer).
 */
class AnswerHandler implements LegacyHandler {
  private answered = false;

  constructor(
    private readonly sink: UpstreamSink,
    private readonly onAnswer: (statusCode: number) => void,
    private readonly resolve: () => void,
    private readonly reject: (err: Error) => void,
  ) {}

  onConnect(abort: (err?: Error) => void): void {
    this.sink.onStart(abort);
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true; // interim: the guard times the wait for the final one
    this.answered = true;
    this.onAnswer(statusCode);
    this.resolve();
    return this.sink.onHeaders(statusCode, rawHeaders, resume);
  }

  onData(chunk: Buffer): boolean {
    return this.sink.onData(chunk);
  }

  onComplete(): void {
    this.sink.onComplete();
  }

  onError(err: Error): void {
    if (this.answered) this.sink.onError(err);
    else this.reject(err);
  }
}
