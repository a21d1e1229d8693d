/**
 * Store.watch on LISTEN/NOTIFY: one channel per schema whose payload is the lock
 * key, one LISTEN per store (a dedicated connection for Postgres), dispatched
 * here to the listeners of each key. After the listening connection comes back,
 * every listener is called once: notifications may have been missed meanwhile.
 */
import type { SqlDriver } from './driver.js';

type Listener = () => void;

export class KeyNotifier {
  private readonly byKey = new Map<string, Set<{ fn: Listener }>>();

  constructor(
    private readonly driver: SqlDriver,
    private readonly channel: string,
  ) {}

  async watch(key: string, fn: Listener): Promise<() => void> {
    // A fresh entry per call, so the same function may watch twice and unsubscribe each once.
    const entry = { fn };
    let set = this.byKey.get(key);
    if (!set) {
      set = new Set();
      this.byKey.set(key, set);
    }
    set.add(entry);
    const remove = (): void => {
      const s = this.byKey.get(key);
      if (!s) return;
      s.delete(entry);
      if (s.size === 0) this.byKey.delete(key);
    };
    try {
      await this.driver.listen(
        this.channel,
        (payload) => this.dispatch(payload),
        () => this.dispatchAll(),
      );
    } catch (err) {
      remove();
      throw err;
    }
    return remove;
  }

  private dispatch(key: string): void {
    const set = this.byKey.get(key);
    if (!set) return;
    for (const entry of [...set]) call(entry.fn);
  }

  private dispatchAll(): void {
    for (const set of [...this.byKey.values()]) for (const entry of [...set]) call(entry.fn);
  }

  clear(): void {
    this.byKey.clear();
  }
}

function call(fn: Listener): void {
  try {
    fn();
  } catch {
    // A listener's failure is its own; it must not stop the others.
  }
}
