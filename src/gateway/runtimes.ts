/**
 * The downstream kinds' runtimes for one gateway: one per kind, following the policy
 * (a reload drops the state of upstreams gone or changed), closed with the gateway.
 */
import type { PolicyHolder } from '../policy/index.js';
import type { Exchange } from './exchange.js';
import { KINDS } from './kinds/index.js';
import type { KindEnvironment, KindRuntime, ResourceFence } from './kinds/types.js';

/** What every request not fenced in the resource is served with (one array, not one each). */
const NO_FENCES: readonly ResourceFence[] = Object.freeze([]);

export class KindRuntimes {
  private readonly runtimes = new Map<string, KindRuntime>();
  private readonly unsubscribe: () => void;

  constructor(env: KindEnvironment, policy: PolicyHolder) {
    for (const [name, kind] of Object.entries(KINDS)) this.runtimes.set(name, kind.open(env));
    for (const runtime of this.runtimes.values()) runtime.retain(policy.current);
    this.unsubscribe = policy.subscribe((next) => {
      for (const runtime of this.runtimes.values()) runtime.retain(next);
    });
  }

  /** Hands a routed request (admitted, when fenced; its state on `ex`) to the runtime of its upstream's kind. */
  serve(ex: Exchange): void | Promise<void> {
    const state = ex.state;
    if (state === null) throw new Error('an unrouted request was handed to a kind');
    const kind = state.match.route.upstream.kind;
    const runtime = this.runtimes.get(kind);
    if (runtime === undefined) throw new Error(`no runtime for kind "${kind}"`);
    const fence = state.fence;
    const fences =
      fence?.mode === 'resource' && fence.token !== null
        ? fence.locks.map((lock) => ({ lock, token: fence.token as bigint }))
        : NO_FENCES;
    return runtime.serve(ex, state, fences);
  }

  async close(): Promise<void> {
    this.unsubscribe();
    for (const runtime of this.runtimes.values()) await runtime.close();
  }
}
