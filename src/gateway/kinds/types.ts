/**
 * The seam for downstream kinds: what sits behind an upstream (`kind: http | postgres |
 * s3`). Each kind is one folder under src/gateway/kinds/ exporting one DownstreamKind,
 * registered in one line in ./index.ts. The gateway's admission path (routing, token
 * parsing, the store's verdict, the drain barrier, events, metrics) is shared; a kind
 * says only what differs:
 *
 * - which locks a request writes under (`writes`): none for a read, one for most writes,
 *   several for a request that writes several objects at once (S3 DeleteObjects);
 * - where the fence is checked (`fenceAt`):
 *   - 'gateway': the gateway admits each lock in the lock store (compare-and-set +
 *     in-flight entry) and keeps the drain barrier; the kind forwards afterwards and must
 *     report when the upstream settled (docs/adr/0003, 0005);
 *   - 'resource': the kind compares-and-sets the token inside the resource, atomically
 *     with the write (the Postgres kind: one transaction); the gateway still asks the
 *     lock store whether the token was ever issued and, with `check: lease`, whether
 *     its lease is live, without recording anything;
 * - how the request is served (`serve`).
 *
 * What a kind must do to keep the safety promises is in docs/adr/0006-downstream-kinds.md.
 */
import type { ProblemError } from '../../errors.js';
import type { ProblemFormat } from '../../http/problems.js';
import type { RecordRefusal } from '../refusal-log.js';
import type { Metrics } from '../../observe/metrics.js';
import type { PolicyKind } from '../../policy/kinds.js';
import type { CompiledPolicy, CompiledRoute, CompiledUpstream } from '../../policy/model.js';
import type { FencingToken } from '../../tokens.js';
import type { GatewayRequestState } from '../context.js';
import type { Exchange } from '../exchange.js';
import type { UpstreamPool } from '../upstreams.js';

export type KindName = string;

// The policy-time half of a kind (its own fields' schema, compileUpstream, compileRoute)
// is the policy layer's PolicyKind: the compiler gets the registry handed in.
export type { FieldError, RouteCompileResult, UpstreamCompileResult } from '../../policy/kinds.js';

/** What the request writes, decided from the matched route and the request's headers. */
export type WriteSet =
  /** Reads pass without a token (no lock involved). */
  | { kind: 'read' }
  /** Locks to fence, each rendered and valid; a write needs a token for every one. */
  | { kind: 'write'; locks: readonly string[] }
  /** Refused before admission (malformed or unsupported request); nothing moves. */
  | { kind: 'refuse'; problem: ProblemError }
  /**
   * The locks are named in the body (S3 DeleteObjects): the gateway reads it whole, at
   * most `maxBytes` and within the route's upload time limits, then asks `locks`; the
   * same bytes are forwarded afterwards.
   */
  | { kind: 'needs-body'; maxBytes: number; locks(body: Buffer): WriteSet };

/** The request as a kind sees it before admission: headers only, the body unread. */
export interface KindRequest {
  method: string;
  /** Raw path as received, without the query. */
  path: string;
  /** Raw query string as received, without '?' ('' when none). */
  query: string;
  rawHeaders: readonly string[];
  params: Readonly<Record<string, string>>;
}

/** For 'resource'-fenced kinds: the token to compare-and-set inside the resource. */
export interface ResourceFence {
  lock: string;
  token: FencingToken;
}

/** The first path segment a request's Host carries (s3: a virtual-hosted bucket), and for which upstream. */
export interface HostPrefix {
  readonly segment: string;
  readonly upstream: CompiledUpstream;
}

/**
 * How requests address the upstreams of a kind by their Host, for one policy (s3:
 * `Host: bucket.domain`, a virtual-hosted-style bucket). Routing asks `prefix` before it
 * matches (the segment goes before the path's), and `refusal` once a route matched.
 */
export interface HostAddressing {
  /** The segment the Host carries for an upstream that declares it, or null. */
  prefix(host: string | undefined): HostPrefix | null;
  /**
   * A refusal when `route` (any kind's) must not take a request with this Host, routed
   * with `prefix`: its upstream reads the Host otherwise, or may read a bucket from it
   * that the policy does not know; else null.
   */
  refusal(route: CompiledRoute, host: string | undefined, prefix: HostPrefix | null): ProblemError | null;
}

export interface DownstreamKind extends PolicyKind {
  readonly name: KindName;
  readonly fenceAt: 'gateway' | 'resource';
  /**
   * How the gateway's refusals of requests addressed to this kind's upstreams are
   * written, for clients that read only their own error format; absent: problem+json.
   */
  readonly problemFormat?: ProblemFormat;
  /** Whether (and how) the Host of a request addresses this kind's upstreams in `policy`; absent or null: not at all. */
  hostAddressing?(policy: CompiledPolicy): HostAddressing | null;
  /**
   * Which locks `req` writes on `route`, a fenced route (with a lock) of an upstream of
   * this kind. Routes without a lock never get here: they are plain pass-through.
   */
  writes(route: CompiledRoute, req: KindRequest): WriteSet;
  /** Runtime for one gateway: serves requests that passed admission, then closes. */
  open(env: KindEnvironment): KindRuntime;
}

export interface KindRuntime {
  /**
   * Serves a routed request that passed admission (gateway-fenced), or a read, or
   * (resource-fenced) a write together with `state.fence` and `fences` to check.
   */
  serve(ex: Exchange, state: GatewayRequestState, fences: readonly ResourceFence[]): void | Promise<void>;
  /** Drops runtime state of upstreams gone or changed in a reloaded policy. */
  retain(policy: CompiledPolicy): void;
  close(): Promise<void>;
}

/** What the gateway gives every kind's runtime. */
export interface KindEnvironment {
  log: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };
  metrics: Metrics;
  /** Upstream HTTP connections and circuit breakers, shared by the HTTP-speaking kinds. */
  pool: UpstreamPool;
  /** Counts and records a write the kind refused for its token (a fence kept in the resource). */
  refused: RecordRefusal;
}
