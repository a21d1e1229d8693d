/**
 * Store operation metrics, issuer and gateway side alike: a Store whose calls are
 * timed (fencegate_store_operation_duration_seconds{op}) and whose failures are
 * counted (fencegate_store_errors_total{op}). One decorator instead of timers at
 * every call site; the gateway and the issuer each wrap the store they are given.
 *
 * Cost per call: the wrapper is made once per operation at construction; a call
 * adds two performance.now() readings, one histogram cell observation (the cell is
 * resolved once), one counter increment on failure, and one .then on the store's own
 * promise (one closure, no async frame, no argument array).
 * A failure is counted where the store reported it: calls the gateway's circuit
 * breaker refuses or gives up waiting for never count here (they are visible in
 * fencegate_breaker_state and fencegate_fenced_writes_total{reason="unavailable"}).
 */
import { STORE_OPS } from '../store/ops.js';
import type { Store } from '../store/types.js';
import type { HistogramCell, Metrics } from './metrics.js';

const INSTRUMENTED = Symbol('fencegate.instrumentedStore');

type Instrumented = Store & { [INSTRUMENTED]?: Metrics };

/**
 * `store` with its STORE_OPS calls measured into `metrics`. Everything else (kind,
 * close, methods added later) is the store's own: its other methods are called on it
 * and its fields read through the prototype chain, so no state splits between the
 * store and the wrapper. Wrapping a store already instrumented for the same metrics
 * returns it as is.
 */
export function instrumentStore(store: Store, metrics: Metrics): Store {
  if ((store as Instrumented)[INSTRUMENTED] === metrics) return store;
  // Own properties are defined, never assigned: an assignment would reach the store
  // through the prototype chain (and a Proxy store's set trap).
  const out = Object.create(store) as object;
  Object.defineProperty(out, INSTRUMENTED, { value: metrics });
  for (const op of STORE_OPS) {
    const call = (store as unknown as Record<string, unknown>)[op];
    if (typeof call !== 'function') continue;
    const fn = call as (a?: unknown, b?: unknown, c?: unknown) => Promise<unknown>;
    // Store operations take at most three arguments: passing them by position spares
    // the rest-parameter array a call would otherwise allocate.
    if (fn.length > 3) throw new Error(`store operation ${op} takes more than three arguments`);
    // Resolved on the first call: operations never used get no histogram series.
    let duration: HistogramCell | null = null;
    const errors = metrics.storeErrors.labels({ op });
    // A promise chain rather than an async frame: two of these run per fenced write.
    const timed = (a?: unknown, b?: unknown, c?: unknown): Promise<unknown> => {
      const started = performance.now();
      const observe = () =>
        (duration ??= metrics.storeOperationSeconds.cell({ op })).observe(
          (performance.now() - started) / 1000,
        );
      let pending: Promise<unknown>;
      try {
        pending = Promise.resolve(fn.call(store, a, b, c)); // the store's own promise, not a new one
      } catch (err) {
        observe();
        errors.inc();
        return Promise.reject(err);
      }
      return pending.then(
        (value) => {
          observe();
          return value;
        },
        (err: unknown) => {
          observe();
          errors.inc();
          throw err;
        },
      );
    };
    Object.defineProperty(out, op, { value: timed });
  }
  // The store's other methods and getters, read from the store each time (bound to it).
  for (let proto: object | null = store; proto !== null && proto !== Object.prototype;) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      if (name === 'constructor' || Object.hasOwn(out, name)) continue;
      const d = Object.getOwnPropertyDescriptor(proto, name);
      if (typeof d?.value !== 'function' && d?.get === undefined) continue; // fields: read through
      Object.defineProperty(out, name, {
        get: () => {
          const v: unknown = Reflect.get(store, name);
          return typeof v === 'function' ? (v as () => unknown).bind(store) : v;
        },
      });
    }
    proto = Object.getPrototypeOf(proto) as object | null;
  }
  return out as unknown as Store;
}
