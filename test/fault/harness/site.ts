/**
 * One fault site: the lifecycle the fault scenarios share, with its cleanup registered once.
 *
 *   const site = useFaultSite({ serveArgs: SESSION_TTL });     // afterAll(site.close) registered
 *   beforeAll(async () => {
 *     const up = await site.startUpstream();                  // a recording, gated upstream
 *     await site.openStore('redis');                          // or 'postgres', 'embedded', …
 *     await site.writePolicy({ app: { url: up.url } }, [...]); // or site.docsPolicy(...)
 *     gw = await site.serve();                                // store args + --policies + serveArgs
 *   });
 *   await site.pause([gw.pid]); …; site.resume();              // SIGSTOP (outside the embedded
 *                                                              // store's write lock) and SIGCONT
 *
 * close() resumes what it paused, kills every gateway it started, then removes the policy,
 * the store and the upstream (the reverse of their start). Runs of one lock (Run, newRun)
 * and a writer retrying on 503 (writeUntilForwarded) are here too: several scenarios share them.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { afterAll, expect } from 'vitest';
import { formatViolation } from '../../checker/index.js';
import { startFencegate, type FencegateProcess } from '../../helpers/procs.js';
import { sleep } from '../../helpers/wait.js';
import { stopOutsideWriteLock } from '../lib/embedded-pause.js';
import { checkRun, HistoryRecorder, opId, type WriteResult } from './history.js';
import { ordersPolicy, writePolicy, type RouteSpec, type UpstreamSpec } from './policy.js';
import { openFaultStore, type FaultStore, type StoreKind } from './stores.js';
import { startGatedUpstream, type GatedUpstream } from './upstream.js';

/** A short gateway session, so a silent gateway's session ends within the scenario. */
export const SESSION_TTL = ['--session-ttl-ms', '1500'];

/** A `fencegate serve` the site started: its pid, and pause/resume of its process. */
export interface SiteGateway extends FencegateProcess {
  pid: number;
  /** SIGSTOP this process (a VM pause), as FaultSite.pause does. */
  pause(): Promise<void>;
  /** SIGCONT it. */
  resume(): void;
}

export interface FaultSiteOptions {
  /** Arguments every serve() gets after the store and policy (e.g. SESSION_TTL). */
  serveArgs?: string[];
}

export class FaultSite {
  upstream: GatedUpstream | null = null;
  store: FaultStore | null = null;
  policy = { dir: '', file: '' };
  readonly gateways: SiteGateway[] = [];
  private readonly paused = new Set<number>();
  private readonly cleanups: (() => Promise<unknown>)[] = [];

  constructor(readonly options: FaultSiteOptions = {}) {}

  /** Runs `cleanup` at close(), before what was registered earlier. */
  defer(cleanup: () => Promise<unknown>): void {
    this.cleanups.push(cleanup);
  }

  async startUpstream(): Promise<GatedUpstream> {
    const upstream = await startGatedUpstream();
    this.upstream = upstream;
    this.defer(() => upstream.close());
    return upstream;
  }

  async openStore(kind: StoreKind): Promise<FaultStore> {
    const store = await openFaultStore(kind);
    this.store = store;
    this.defer(() => store.cleanup());
    return store;
  }

  async writePolicy(
    upstreams: Record<string, UpstreamSpec>,
    routes: RouteSpec[],
  ): Promise<{ dir: string; file: string }> {
    const policy = await writePolicy(upstreams, routes);
    this.policy = policy;
    this.defer(() => rm(policy.dir, { recursive: true, force: true }));
    return policy;
  }

  /** ordersPolicy (the sample's order-writes route) to the site's upstream. */
  async ordersPolicy(opts: { timeoutMs?: number; drainTimeoutMs?: number } = {}) {
    const policy = await ordersPolicy((this.upstream as GatedUpstream).url, opts);
    this.policy = policy;
    this.defer(() => rm(policy.dir, { recursive: true, force: true }));
    return policy;
  }

  /** A policy file the site did not write (e.g. a fixture): used, never removed. */
  usePolicy(file: string): void {
    this.policy = { dir: '', file };
  }

  /**
   * The `docs` route (/docs/orders/:id, lock doc:{id}, drain 1.5 s) to the site's upstream
   * with the bound `timeoutMs` and a breaker that never opens, plus `extra` routes.
   */
  docsPolicy(timeoutMs: number, extra: RouteSpec[] = []): Promise<{ dir: string; file: string }> {
    const url = (this.upstream as GatedUpstream).url;
    return this.writePolicy({ app: { url, timeoutMs, breaker: { volumeThreshold: 10_000 } } }, [
      { name: 'docs', path: '/docs/orders/:id', upstream: 'app', lock: 'doc:{id}', drainTimeoutMs: 1500 },
      ...extra,
    ]);
  }

  /**
   * `fencegate serve` with the site's store (if it opened one), `args`, the policy and the
   * site's serveArgs; killed at close().
   */
  async serve(args: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<SiteGateway> {
    const g = await startFencegate(
      [
        ...(this.store?.args ?? []),
        ...args,
        '--policies',
        this.policy.file,
        ...(this.options.serveArgs ?? []),
      ],
      env,
    );
    const pid = g.proc.pid as number;
    const gateway: SiteGateway = Object.assign(g, {
      pid,
      pause: () => this.pause([pid]),
      resume: () => this.resume([pid]),
    });
    this.gateways.push(gateway);
    return gateway;
  }

  /**
   * SIGSTOPs `pids`; on the embedded store while the test holds the directory's write lock,
   * so a stopped process cannot stop the other processes' writes (lib/embedded-pause.ts).
   */
  async pause(pids: number[]): Promise<void> {
    for (const p of pids) this.paused.add(p);
    const dir = this.store?.dir ?? null;
    if (dir === null) for (const p of pids) process.kill(p, 'SIGSTOP');
    else await stopOutsideWriteLock(dir, pids);
  }

  /** SIGCONTs `pids`, or everything paused; a process already gone is skipped. */
  resume(pids: number[] = [...this.paused]): void {
    for (const p of pids) {
      this.paused.delete(p);
      try {
        process.kill(p, 'SIGCONT');
      } catch {
        /* gone */
      }
    }
  }

  async close(): Promise<void> {
    this.resume();
    for (const g of this.gateways.splice(0)) await g.kill().catch(() => undefined);
    for (const c of this.cleanups.splice(0).reverse()) await c().catch(() => undefined);
  }
}

/** A FaultSite whose close() runs after the enclosing describe's (or file's) tests. */
export function useFaultSite(options: FaultSiteOptions = {}): FaultSite {
  const site = new FaultSite(options);
  afterAll(() => site.close(), 60_000);
  return site;
}

/** One scenario's lock: its history, the lock doc:<tag> and the document id <tag>. */
export interface Run {
  history: HistoryRecorder;
  lock: string;
  id: string;
  tag: string;
}

export function newRun(): Run {
  const tag = randomBytes(3).toString('hex');
  return { history: new HistoryRecorder(), lock: `doc:${tag}`, id: tag, tag };
}

/**
 * The next owner: PUTs /docs/orders/<run.id> (a new request id each time), retrying every
 * 200 ms on 503 until it is forwarded or `timeoutMs` passed.
 */
export async function writeUntilForwarded(
  run: Run,
  data: string,
  token: string,
  writer: string,
  timeoutMs: number,
): Promise<{ result: WriteResult; requestId: string; attempts: number }> {
  const end = Date.now() + timeoutMs;
  for (let attempts = 1; ; attempts++) {
    const requestId = opId(writer);
    const path = `/docs/orders/${run.id}`;
    const result = await run.history.write({ data, path, lock: run.lock, token, writer, requestId });
    if (result.status !== 503 || Date.now() > end) return { result, requestId, attempts };
    await sleep(200);
  }
}

/** The history checker over `run`'s lock finds nothing. */
export async function expectRunClean(upstreamUrl: string, run: Run): Promise<void> {
  const { result } = await checkRun(upstreamUrl, run.history, { only: (w) => w.lock === run.lock });
  expect(result.ok, formatViolation(result)).toBe(true);
}
