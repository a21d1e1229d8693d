/**
 * Upstream connections: one undici Agent and one opossum circuit breaker per
 * upstream, shared by all requests. reply-from is given `dispatcher` as its undici
 * instance; each forwarded request runs inside a ForwardScope (AsyncLocalStorage),
 * which tells the dispatcher which upstream it is for and lets it report exactly
 * when the upstream request started and settled (answer, error or timeout) — the
 * moment the request's in-flight fence entry can be finished.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import CircuitBreaker from 'opossum';
import { Agent, type Dispatcher } from 'undici';
import type { Metrics } from '../observe/metrics.js';
import type { CompiledPolicy, CompiledUpstream } from '../policy/index.js';
import { isUpstreamFailure } from './upstream-errors.js';

export interface ForwardScope {
  upstream: CompiledUpstream;
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

interface Client {
  signature: string;
  agent: Agent;
  breaker: CircuitBreaker<[RequestOptions, ForwardScope], ResponseData>;
  openedAt: number;
}

export interface UpstreamLog {
  warn(obj: object, msg: string): void;
}

const scope = new AsyncLocalStorage<ForwardScope>();

export class UpstreamPool {
  private readonly clients = new Map<string, Client>();

  /** The `undici` option for @fastify/reply-from. */
  readonly dispatcher = { request: (opts: RequestOptions, cb: Callback) => this.dispatch(opts, cb) };

  constructor(
    private readonly metrics: Metrics,
    private readonly log: UpstreamLog,
  ) {}

  /** Runs `fn` (which calls reply.from) with the scope visible to the dispatcher. */
  run<T>(forward: ForwardScope, fn: () => T): T {
    return scope.run(forward, fn);
  }

  /** Seconds until the upstream's open circuit lets a trial request through. */
  retryAfterSeconds(upstream: CompiledUpstream): number {
    const client = this.clients.get(upstream.name);
    if (client === undefined) return 1;
    const reopen = client.openedAt + upstream.breaker.resetTimeoutMs - Date.now();
    return Math.max(1, Math.ceil(reopen / 1000));
  }

  /** Drops (and gracefully closes) clients of upstreams that are gone or changed in `policy`. */
  retain(policy: CompiledPolicy): void {
    for (const [name, client] of this.clients) {
      const upstream = Object.hasOwn(policy.upstreams, name) ? policy.upstreams[name] : undefined;
      if (upstream === undefined || signatureOf(upstream) !== client.signature) this.drop(name, client);
    }
  }

  async close(): Promise<void> {
    const closing = [...this.clients.entries()].map(([name, client]) => this.drop(name, client));
    await Promise.all(closing);
  }

  private dispatch(opts: RequestOptions, cb: Callback): void {
    const forward = scope.getStore();
    if (forward === undefined) {
      cb(new Error('upstream request outside a forward scope'));
      return;
    }
    const { upstream } = forward;
    const client = this.client(upstream);
    const started = performance.now();
    const observe = (statusClass: string) =>
      this.metrics.upstreamSeconds.observe(
        { upstream: upstream.name, status_class: statusClass },
        (performance.now() - started) / 1000,
      );
    forward.started();
    const request = { ...opts, headersTimeout: upstream.timeoutMs, bodyTimeout: upstream.timeoutMs };
    client.breaker.fire(request, forward).then(
      (res) => {
        observe(`${Math.floor(res.statusCode / 100)}xx`);
        forward.settled();
        // When the client has already gone, reply-from destroys this body without an error
        // listener, and undici's body then emits RequestAbortedError: unhandled, it would
        // crash the process. Whoever pipes the body adds its own listeners; this one only
        // keeps an abandoned body's error from being fatal.
        res.body.on('error', ignoreAbandonedBodyError);
        cb(null, res);
      },
      (err: Error) => {
        observe('error');
        forward.settled();
        cb(err);
      },
    );
  }

  private client(upstream: CompiledUpstream): Client {
    const signature = signatureOf(upstream);
    const existing = this.clients.get(upstream.name);
    if (existing !== undefined && existing.signature === signature) return existing;
    if (existing !== undefined) void this.drop(upstream.name, existing);
    const agent = new Agent({ connections: 256, keepAliveTimeout: 4_000 });
    const { breaker: settings } = upstream;
    const breaker = new CircuitBreaker(
      (opts: RequestOptions, _forward: ForwardScope) => agent.request(opts),
      {
        name: `upstream:${upstream.name}`,
        timeout: false,
        errorThresholdPercentage: settings.errorThresholdPercentage,
        volumeThreshold: settings.volumeThreshold,
        resetTimeout: settings.resetTimeoutMs,
        rollingCountTimeout: settings.rollingWindowMs,
        // true = "not a failure": client-side errors never open the upstream's circuit.
        errorFilter: ((err: unknown, _opts: RequestOptions, forward: ForwardScope) =>
          forward.clientGone() || !isUpstreamFailure(err)) as (err: unknown) => boolean,
      },
    );
    const client: Client = { signature, agent, breaker, openedAt: 0 };
    breaker.on('open', () => {
      client.openedAt = Date.now();
      this.log.warn(
        { upstream: upstream.name },
        'upstream circuit opened: requests get 502 until it recovers',
      );
    });
    breaker.on('close', () => this.log.warn({ upstream: upstream.name }, 'upstream circuit closed'));
    this.clients.set(upstream.name, client);
    return client;
  }

  private async drop(name: string, client: Client): Promise<void> {
    if (this.clients.get(name) === client) this.clients.delete(name);
    client.breaker.shutdown();
    await client.agent.close().catch(() => undefined);
  }
}

function signatureOf(upstream: CompiledUpstream): string {
  return JSON.stringify([upstream.origin, upstream.timeoutMs, upstream.breaker]);
}

function ignoreAbandonedBodyError(): void {}
