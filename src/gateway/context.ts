/**
 * Per-request gateway state, attached to the fastify request by the routing plugin:
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
  | 'shadow-refused';

export interface FenceOutcome {
  mode: FenceMode;
  lock: string | null;
  /** The presented token when it parsed; forwarded to the upstream as Fencing-Token. */
  token: FencingToken | null;
  /** The in-flight entry to finish once the upstream answered (enforced routes only). */
  entry: InflightEntry | null;
}

export interface GatewayRequestState {
  policy: CompiledPolicy;
  match: RouteMatch;
  /** Raw request path (no query), as forwarded. */
  path: string;
  fence: FenceOutcome | null;
}

declare module 'fastify' {
  interface FastifyRequest {
    fencegate: GatewayRequestState | null;
  }
}
