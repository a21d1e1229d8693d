/**
 * Wraps a real Store to inject failures and observe calls: `down = true` makes every
 * call throw StoreUnavailableError (as a store whose backend is unreachable does),
 * `failing` only the calls named in it;
 * `finishes` counts finish() calls per request id (exactly-once checks).
 */
import { StoreUnavailableError } from '../../src/errors.js';
import type { Store } from '../../src/store/types.js';

export interface FaultyStore extends Store {
  down: boolean;
  /** Added to every call, to simulate a slow store. */
  delayMs: number;
  readonly finishes: Map<string, number>;
  readonly calls: string[];
  /** Operations (method names) that throw StoreUnavailableError while listed, as `down` does for all. */
  readonly failing: Set<string>;
}

export function faultyStore(inner: Store): FaultyStore {
  const finishes = new Map<string, number>();
  const calls: string[] = [];
  const failing = new Set<string>();
  const control = { down: false, delayMs: 0 };
  const proxy = new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'down' || prop === 'delayMs') return control[prop];
      if (prop === 'finishes') return finishes;
      if (prop === 'calls') return calls;
      if (prop === 'failing') return failing;
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function' || prop === 'close')
        return typeof value === 'function' ? value.bind(target) : value;
      return async (...args: unknown[]) => {
        calls.push(String(prop));
        if (prop === 'finish') finishes.set(String(args[1]), (finishes.get(String(args[1])) ?? 0) + 1);
        if (control.delayMs > 0) await new Promise((r) => setTimeout(r, control.delayMs));
        if (control.down || failing.has(String(prop)))
          throw new StoreUnavailableError(`injected: store down (${String(prop)})`);
        return (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      };
    },
    set(_target, prop, value) {
      if (prop === 'down' || prop === 'delayMs') {
        (control as Record<string, unknown>)[prop] = value;
        return true;
      }
      return false;
    },
  });
  return proxy as FaultyStore;
}
