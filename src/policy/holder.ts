/**
 * The live policy: the current compiled policy, replaced atomically by reload().
 * A reload that fails keeps the last good policy and reports the errors; requests
 * already being handled keep the policy they started with.
 */
import { statSync, watch as fsWatch, type FSWatcher } from 'node:fs';
import { pathExists } from '../paths.js';
import { basename, dirname } from 'node:path';
import type { Env } from './env.js';
import type { PolicyError } from './errors.js';
import type { PolicyKinds } from './kinds.js';
import { loadPolicies } from './load.js';
import { createCompiledPolicy, type CompiledPolicy } from './model.js';

export type ReloadResult = { ok: true; policy: CompiledPolicy } | { ok: false; errors: PolicyError[] };

export interface WatchOptions {
  /** Quiet time after the last change before reloading (editors write in bursts). Default 200 ms. */
  debounceMs?: number;
}

/**
 * A Kubernetes ConfigMap or Secret volume updates its files by pointing this symlink at
 * a new directory (the `*.yaml` entries are symlinks through it): a change to it is a
 * change to the policies.
 */
const KUBERNETES_DATA = '..data';

/** A policy with no routes: every request is answered 404 no-route. */
export const EMPTY_POLICY: CompiledPolicy = createCompiledPolicy([], {}, []);

export class PolicyHolder {
  private policy: CompiledPolicy;
  private readonly listeners = new Set<(policy: CompiledPolicy) => void>();
  private queued: Promise<ReloadResult> | null = null;
  private tail: Promise<unknown> = Promise.resolve();
  private readonly watchers = new Set<() => void>();

  /**
   * `initial` is the policy served until the first successful reload(); without it,
   * no route matches (every request gets 404 no-route) until then.
   */
  constructor(
    /** The file or directory the policy is loaded from. */
    readonly path: string,
    /** The kinds its upstreams may be of (the registry the composition root hands in). */
    readonly kinds: PolicyKinds,
    initial: CompiledPolicy = EMPTY_POLICY,
    /** What `${NAME}` in an upstream's url reads, at every load (src/policy/env.ts). */
    private readonly env: Env = process.env,
  ) {
    this.policy = initial;
  }

  /**
   * Loads `path` for the first time; there is no last good policy to fall back on yet.
   * With `mayBeMissing`, a path where nothing exists is not an error: the holder then
   * serves no routes (`missing: true`) until a reload finds policies there.
   */
  static async openFor(
    path: string,
    kinds: PolicyKinds,
    options: { mayBeMissing?: boolean; env?: Env } = {},
  ): Promise<{ ok: true; holder: PolicyHolder; missing: boolean } | { ok: false; errors: PolicyError[] }> {
    const env = options.env ?? process.env;
    if (options.mayBeMissing === true && !(await pathExists(path))) {
      return { ok: true, holder: new PolicyHolder(path, kinds, EMPTY_POLICY, env), missing: true };
    }
    const loaded = await loadPolicies(path, kinds, env);
    return loaded.ok
      ? { ok: true, holder: new PolicyHolder(path, kinds, loaded.policy, env), missing: false }
      : loaded;
  }

  get current(): CompiledPolicy {
    return this.policy;
  }

  /**
   * Reloads from disk. On success the new policy is current for every request that
   * starts afterwards; on failure the last good policy stays and the errors are returned.
   * Loads never overlap: a call made while a load runs gets the next load (which reads
   * the files as they are after the call); calls made before that one starts share it.
   */
  reload(): Promise<ReloadResult> {
    if (this.queued !== null) return this.queued;
    const next = this.tail.then(() => {
      this.queued = null;
      return this.loadOnce();
    });
    this.queued = next;
    this.tail = next.catch(() => undefined);
    return next;
  }

  /** Called with the new policy after each successful reload. Returns an unsubscribe function. */
  subscribe(listener: (policy: CompiledPolicy) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Reloads when the policy file or directory changes (fs.watch, debounced). Watches
   * the directory, also for a single file, so editors that save by rename are seen.
   * `onReload` is called after every watch-triggered reload, successful or not.
   * If nothing exists at the path yet, watching starts after the first successful
   * reload (SIGHUP once the directory is created). Returns a function that stops
   * this watcher; unwatch() stops all of them.
   */
  watch(onReload?: (result: ReloadResult) => void, options: WatchOptions = {}): () => void {
    let isDir: boolean;
    try {
      isDir = statSync(this.path).isDirectory();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      return this.watchOnceLoaded(onReload, options);
    }
    return this.watchPath(isDir, onReload, options);
  }

  private watchOnceLoaded(
    onReload: ((result: ReloadResult) => void) | undefined,
    options: WatchOptions,
  ): () => void {
    let stopWatching: (() => void) | null = null;
    const unsubscribe = this.subscribe(() => {
      unsubscribe();
      this.watchers.delete(stop);
      stopWatching = this.watch(onReload, options);
    });
    const stop = () => {
      unsubscribe();
      stopWatching?.();
      this.watchers.delete(stop);
    };
    this.watchers.add(stop);
    return stop;
  }

  private watchPath(
    isDir: boolean,
    onReload: ((result: ReloadResult) => void) | undefined,
    options: WatchOptions,
  ): () => void {
    const debounceMs = options.debounceMs ?? 200;
    const dir = isDir ? this.path : dirname(this.path);
    const only = isDir ? null : basename(this.path);
    let timer: NodeJS.Timeout | null = null;
    const trigger = (_event: string, name: string | Buffer | null) => {
      const file = name === null ? null : name.toString();
      if (only !== null && file !== null && file !== only) return;
      if (only === null && file !== null && !/\.ya?ml$/i.test(file) && file !== KUBERNETES_DATA) return;
      if (timer !== null) clearTimeout(timer);
      timer = setTimeout(() => {
        timer = null;
        void this.reload().then((r) => onReload?.(r));
      }, debounceMs);
    };
    const watcher: FSWatcher = fsWatch(dir, { persistent: false }, trigger);
    watcher.on('error', () => undefined);
    const stop = () => {
      if (timer !== null) clearTimeout(timer);
      watcher.close();
      this.watchers.delete(stop);
    };
    this.watchers.add(stop);
    return stop;
  }

  /** Stops every watcher started by watch(). */
  unwatch(): void {
    for (const stop of [...this.watchers]) stop();
  }

  private async loadOnce(): Promise<ReloadResult> {
    const loaded = await loadPolicies(this.path, this.kinds, this.env);
    if (!loaded.ok) return loaded;
    this.policy = loaded.policy;
    for (const listener of this.listeners) listener(loaded.policy);
    return loaded;
  }
}
