/** The compiled, frozen form of a policy: what the gateway consults per request. */
import type { FenceCheck } from '../store/types.js';
import { matchPath, type PathPattern } from './path-pattern.js';
import type { HttpMethod } from './schema.js';
import type { LockTemplate } from './template.js';

export interface BreakerSettings {
  /** Open the circuit when at least this share (%) of calls in the window failed. */
  readonly errorThresholdPercentage: number;
  /** Calls in the window before the circuit may open at all. */
  readonly volumeThreshold: number;
  /** How long the circuit stays open before a trial call. */
  readonly resetTimeoutMs: number;
  readonly rollingWindowMs: number;
}

export interface CompiledUpstream {
  readonly name: string;
  /** The downstream kind (src/gateway/kinds): http, postgres, s3… */
  readonly kind: string;
  /** Normalised URL as written, without credentials (safe to log). */
  readonly url: string;
  /** scheme://host:port for the HTTP-speaking kinds; "" otherwise. */
  readonly origin: string;
  /** Path prefix prepended to forwarded paths: "" or e.g. "/api". */
  readonly basePath: string;
  readonly timeoutMs: number;
  readonly breaker: BreakerSettings;
  /** Kind-specific settings, compiled by the kind (e.g. a connection string). */
  readonly settings: Readonly<Record<string, unknown>>;
  /** The policy's `tls` for an https upstream (files read at load); null: the defaults. */
  readonly tls: UpstreamTls | null;
  /**
   * `honour`: the upstream applies method-override headers, so a request carrying one is
   * routed and fenced by the method it names (src/gateway/routing.ts); `strip`: they are
   * dropped before forwarding (docs/security.md, "Request hygiene").
   */
  readonly methodOverride: 'strip' | 'honour';
}

/** How the gateway connects to an https upstream; PEM texts read from the files the policy names. */
export interface UpstreamTls {
  /** Only these CAs are trusted for this upstream; null: the gateway's default (built-in roots, --upstream-ca). */
  readonly ca: readonly string[] | null;
  readonly serverName: string | null;
  /** The gateway's client certificate and key (mTLS to the upstream). */
  readonly cert: string | null;
  readonly key: string | null;
  /** Digest of all of the above: an upstream whose files changed gets new connections on reload. */
  readonly digest: string;
}

export interface FencingSettings {
  readonly check: FenceCheck;
  /** False: shadow mode (checked, counted, logged, but forwarded anyway; the store is not changed). */
  readonly enforce: boolean;
  /** How long a write waits at the drain barrier before giving up with 503. */
  readonly drainTimeoutMs: number;
}

/** Bounds on the client's request body (the request is cut with 408 past either). */
export interface UploadSettings {
  /** Longest time without a body byte from the client. */
  readonly idleTimeoutMs: number;
  /** Longest time for the whole body. */
  readonly timeoutMs: number;
}

/** A route's Idempotency-Key replays (docs/gateway.md, "Idempotency"). */
export interface IdempotencySettings {
  /** The request header that carries the key, lower-cased. */
  readonly header: string;
  /** How long a stored answer is replayed after it was stored, ms. */
  readonly ttlMs: number;
}

export interface CompiledRoute {
  readonly name: string;
  /** Where the route is defined, for logs and errors. */
  readonly file: string;
  readonly line: number;
  readonly methods: readonly HttpMethod[];
  readonly path: PathPattern;
  readonly upstream: CompiledUpstream;
  /** Null for a plain (unfenced) proxy route. */
  readonly lock: LockTemplate | null;
  /** Set exactly when `lock` is set. */
  readonly fencing: FencingSettings | null;
  readonly upload: UploadSettings;
  /** Null: the route keeps and replays no answers. */
  readonly idempotency: IdempotencySettings | null;
  /** Later fenced routes whose matching requests this route takes on purpose (policy `shadows`). */
  readonly shadows: readonly string[];
  /** Kind-specific route settings, compiled by the upstream's kind (e.g. table, key, columns). */
  readonly target: Readonly<Record<string, unknown>>;
}

export interface RouteMatch {
  readonly route: CompiledRoute;
  readonly params: Readonly<Record<string, string>>;
}

export interface CompiledPolicy {
  readonly files: readonly string[];
  readonly upstreams: Readonly<Record<string, CompiledUpstream>>;
  /** In file order, then order within a file; the first match wins. */
  readonly routes: readonly CompiledRoute[];
  /** First route whose methods include `method` and whose path matches the (normalised) segments. */
  match(method: string, segments: readonly string[]): RouteMatch | null;
}

export const DEFAULTS = Object.freeze({
  timeoutMs: 10_000,
  check: 'token' as FenceCheck,
  enforce: true,
  drainTimeoutMs: 5_000,
  upload: Object.freeze({ idleTimeoutMs: 60_000, timeoutMs: 900_000 }),
  idempotency: Object.freeze({ header: 'Idempotency-Key', ttlMs: 86_400_000 }),
  breaker: Object.freeze({
    errorThresholdPercentage: 50,
    volumeThreshold: 5,
    resetTimeoutMs: 10_000,
    rollingWindowMs: 10_000,
  }),
});

export function createCompiledPolicy(
  files: readonly string[],
  upstreams: Record<string, CompiledUpstream>,
  routes: CompiledRoute[],
): CompiledPolicy {
  const frozenRoutes = deepFreeze(routes);
  const policy: CompiledPolicy = {
    files: Object.freeze([...files]),
    // No prototype: lookups by a user-chosen name never reach Object.prototype.
    upstreams: deepFreeze(Object.assign(Object.create(null) as Record<string, CompiledUpstream>, upstreams)),
    routes: frozenRoutes,
    match(method, segments) {
      for (const route of frozenRoutes) {
        if (!(route.methods as readonly string[]).includes(method)) continue;
        const params = matchPath(route.path, segments);
        // Not frozen: freezing gave each match's object a map of its own (readonly by type).
        if (params !== null) return { route, params };
      }
      return null;
    },
  };
  return Object.freeze(policy);
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}
