/**
 * Store.watch on etcd: one etcd watch per lock this process watches, on the lock's wake
 * key (`<namespace>/wake/<lock>`), which every transaction that must wake its watchers
 * writes in the same commit (txn.ts). No polling: etcd pushes the write to every process
 * that watches, over the client's one multiplexed watch stream. After the stream was cut
 * and resumed, every listener is called once (spuriously, as the contract allows), since
 * the client resumes from the last revision it saw but a waiter must not rely on it.
 */
import type { Etcd3, Watcher } from 'etcd3';
import { wakeKey } from './keys.js';

type Listener = () => void;

interface Watched {
  listeners: Set<{ fn: Listener }>;
  watcher: Promise<Watcher>;
}

export class WakeWatch {
  private readonly watched = new Map<string, Watched>();

  constructor(
    private readonly client: Etcd3,
    private readonly ns: string,
    /** How long a new watch may take to be confirmed before watch() fails. */
    private readonly timeoutMs: number,
  ) {}

  /** Resolves once etcd confirmed the watch; the returned function unsubscribes. */
  async watch(lock: string, fn: Listener): Promise<() => void> {
    const entry = { fn };
    let w = this.watched.get(lock);
    if (w === undefined) {
      const listeners = new Set<{ fn: Listener }>();
      const watcher = this.client.watch().key(wakeKey(this.ns, lock)).create();
      w = { listeners, watcher };
      this.watched.set(lock, w);
      void watcher.then(
        (watch) => {
          let cut = false;
          watch.on('put', () => call(listeners));
          watch.on('disconnected', () => (cut = true));
          watch.on('connected', () => {
            if (cut) call(listeners);
            cut = false;
          });
          watch.on('error', () => undefined); // the client reconnects; 'connected' wakes after
        },
        () => this.watched.delete(lock),
      );
    }
    w.listeners.add(entry);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no watch within ${this.timeoutMs} ms`)), this.timeoutMs);
    });
    try {
      await Promise.race([w.watcher, late]);
    } catch (err) {
      // etcd unreachable or without a leader: fail, as every other call does, instead of waiting on.
      this.unwatch(lock, entry);
      throw err;
    } finally {
      clearTimeout(timer);
    }
    return () => this.unwatch(lock, entry);
  }

  private unwatch(lock: string, entry: { fn: Listener }): void {
    const w = this.watched.get(lock);
    if (w === undefined) return;
    w.listeners.delete(entry);
    if (w.listeners.size > 0) return;
    this.watched.delete(lock);
    void w.watcher.then((watch) => watch.cancel()).catch(() => undefined);
  }

  async close(): Promise<void> {
    const all = [...this.watched.values()];
    this.watched.clear();
    await Promise.all(all.map((w) => w.watcher.then((watch) => watch.cancel()).catch(() => undefined)));
  }
}

function call(listeners: Set<{ fn: Listener }>): void {
  for (const entry of [...listeners]) {
    try {
      entry.fn();
    } catch {
      // A listener's failure is its own; it must not stop the others.
    }
  }
}
