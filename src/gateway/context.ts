/**
 * Per-request gateway state, kept on the request's Exchange once routed:
 * the route matched on the policy current when the request arrived (a reload during
 * the request does not change it), and the fence verdict once the fence ran.
 */
import type { CompiledPolicy, RouteMatch } from '../policy/index.js';
import type { FencingToken } from '../tokens.js';
import type { InflightEntry } from './inflight.js';

export type FenceMode =
  /** Enforced route, token admitted (and recorded in the store). */
  | 'admitted'
  /** Shadow route, the token would have been admitted. */
  | 'shadow-admitted'
  /** Shadow route, the request would have been refused; forwarded anyway. */
  | 'shadow-refused'
  /** The route's kind checks the token inside the resource (the store judged it genuine). */
  | 'resource';

export interface FenceOutcome {
  mode: FenceMode;
  /** The (first, in canonical order) lock written; null when it could not be rendered. */
  lock: string | null;
  /** Every lock the request writes, in canonical order. */
  locks: readonly string[];
  /** The presented token when it parsed; forwarded to the upstream as Fencing-Token. */
  token: FencingToken | null;
  /**
   * In-flight entries (one per lock) to finish once the upstream answered; only for
   * admissions recorded in the lock store (enforced, gateway-fenced kinds). All belong to
   * one gateway session.
   */
  entries: readonly InflightEntry[];
}

export interface GatewayRequestState {
  policy: CompiledPolicy;
  match: RouteMatch;
  /**
   * The method the request was routed and fenced by: its own, or the one a method-override
   * header names when the route's upstream honours them (then the header is forwarded).
   */
  method: string;
  /** Raw request path (no query), as forwarded. */
  path: string;
  /**
   * The path the request was routed by: `path`, or, when its Host carries the first
   * segment (a virtual-hosted S3 bucket), `path` with that segment before it.
   */
  routedPath: string;
  fence: FenceOutcome | null;
}
