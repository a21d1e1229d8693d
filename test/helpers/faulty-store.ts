/**
 * Wraps a real Store to inject failures and observe calls: `down = true` makes every
 * call throw StoreUnavailableError (as a store whose backend is unreachable does),
 * `failing` only the calls named in it;
 * `finishes` counts finish() calls per request id (exactly-once checks), `finishedAt` when
 * the first was made (Date.now()); `entries` lists the request ids whose admission
 * recorded an in-flight entry.
 */
import { StoreUnavailableError } from '../../src/errors.js';
import type { AdmitRequest, AdmitResult, Store } from '../../src/store/types.js';
import { sleep } from './wait.js';

export interface FaultyStore extends Store {
  down: boolean;
  /** Added to every call, to simulate a slow store. */
  delayMs: number;
  readonly finishes: Map<string, number>;
  readonly finishedAt: Map<string, number>;
  /** Request ids of admissions that recorded an entry (admitted with `record`), in answer order. */
  readonly entries: string[];
  /**
   * Resolves once every entry recorded so far has had a finish() call (an entry shared by
   * an admission hold is finished when the hold closes, after its last write); rejects
   * after 5 s.
   */
  entriesFinished(): Promise<void>;
  readonly calls: string[];
  /** Operations (method names) that throw StoreUnavailableError while listed, as `down` does for all. */
  readonly failing: Set<string>;
}

export function faultyStore(inner: Store): FaultyStore {
  const finishes = new Map<string, number>();
  const finishedAt = new Map<string, number>();
  const calls: string[] = [];
  const entries: string[] = [];
  const failing = new Set<string>();
  const control = { down: false, delayMs: 0 };
  const entriesFinished = async () => {
    const end = Date.now() + 5000;
    while (!entries.every((id) => finishes.has(id))) {
      if (Date.now() > end)
        throw new Error(`entries never finished: ${entries.filter((id) => !finishes.has(id)).join(', ')}`);
      await sleep(5);
    }
  };
  const proxy = new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'down' || prop === 'delayMs') return control[prop];
      if (prop === 'finishes') return finishes;
      if (prop === 'finishedAt') return finishedAt;
      if (prop === 'calls') return calls;
      if (prop === 'entries') return entries;
      if (prop === 'entriesFinished') return entriesFinished;
      if (prop === 'failing') return failing;
      const value: unknown = Reflect.get(target, prop, receiver);
      // Not store calls: close, and onReset (synchronous, it returns the unsubscribe function).
      if (typeof value !== 'function' || prop === 'close' || prop === 'onReset')
        return typeof value === 'function' ? value.bind(target) : value;
      return async (...args: unknown[]) => {
        calls.push(String(prop));
        if (prop === 'finish') {
          const id = String(args[1]);
          finishes.set(id, (finishes.get(id) ?? 0) + 1);
          if (!finishedAt.has(id)) finishedAt.set(id, Date.now());
        }
        if (control.delayMs > 0) await sleep(control.delayMs);
        if (control.down || failing.has(String(prop)))
          throw new StoreUnavailableError(`injected: store down (${String(prop)})`);
        const result = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        const admission = args[0] as AdmitRequest;
        if (prop === 'admit' && admission.record === true && (result as AdmitResult).ok)
          entries.push(admission.requestId);
        return result;
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
