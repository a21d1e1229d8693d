/**
 * The Lua scripts, one file per atomic operation in ./scripts/, registered once per
 * client with defineCommand under versioned names (a changed script gets a new name, so
 * processes of two versions sharing one Redis never run each other's code by accident).
 * ioredis sends EVALSHA and falls back to EVAL on NOSCRIPT (e.g. after a Redis restart).
 *
 * Each script is lib.lua (token-string arithmetic, clock, queue helpers) followed by the
 * script's own file. The files are read relative to this module, so the same code works
 * from src/ (tests) and dist/ (the build copies .lua files).
 */
import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';

/**
 * Script name -> [file, number of KEYS]. 'encoded': not registered on the client; called
 * with its arguments encoded by the caller (encoded-script.ts, fence-batch.ts).
 */
export const SCRIPTS = {
  fg_acquire_v4: ['acquire.lua', 5],
  fg_renew_v2: ['renew.lua', 1],
  fg_release_v1: ['release.lua', 1],
  fg_enqueue_waiter_v1: ['enqueue_waiter.lua', 2],
  fg_remove_waiter_v1: ['remove_waiter.lua', 2],
  fg_inspect_v3: ['inspect.lua', 5],
  fg_fence_batch_v2: ['fence_batch.lua', 'encoded'],
  fg_deliver_v1: ['deliver.lua', 1],
  fg_lower_inflight_v3: ['lower_inflight.lua', 1],
  fg_drop_inflight_v2: ['drop_inflight.lua', 1],
  fg_inflight_forget_v1: ['inflight_forget.lua', 1],
  fg_idem_begin_v1: ['idem_begin.lua', 1],
  fg_idem_finish_v1: ['idem_finish.lua', 1],
  fg_idem_abandon_v1: ['idem_abandon.lua', 1],
  fg_session_open_v1: ['session_open.lua', 1],
  fg_session_beat_v1: ['session_beat.lua', 1],
  fg_session_end_v1: ['session_end.lua', 1],
  fg_epoch_init_v1: ['epoch_init.lua', 1],
  fg_epoch_bump_v1: ['epoch_bump.lua', 1],
  fg_epoch_verify_v1: ['epoch_verify.lua', 1],
  // Run by the cluster's verification on the epoch's primary before it is verified (cluster.ts).
  fg_epoch_verify_cluster_v1: ['epoch_verify_cluster.lua', 'encoded'],
} as const satisfies Record<string, readonly [string, number | 'encoded']>;

export type ScriptName = keyof typeof SCRIPTS;

/** The registered commands (all but the encoded scripts), typed: KEYS first, then ARGV, all strings; replies unparsed. */
export interface FencegateCommands {
  fg_acquire_v4(
    ctr: string,
    lease: string,
    waitq: string,
    waitdl: string,
    req: string,
    globalFloor: string,
    leaseId: string,
    owner: string,
    ttlMs: string,
    waiterId: string,
    reqTtlMs: string,
    channel: string,
    history: string,
    ownerLine: string,
  ): Promise<unknown>;
  fg_renew_v2(lease: string, leaseId: string, ttlMs: string, globalFloor: string): Promise<unknown>;
  fg_release_v1(lease: string, leaseId: string, channel: string): Promise<unknown>;
  fg_enqueue_waiter_v1(waitq: string, waitdl: string, waiterId: string, waitMs: string): Promise<unknown>;
  fg_remove_waiter_v1(waitq: string, waitdl: string, waiterId: string, channel: string): Promise<unknown>;
  fg_inspect_v3(
    ctr: string,
    lease: string,
    waitq: string,
    waitdl: string,
    fence: string,
    globalFloor: string,
  ): Promise<unknown>;
  fg_deliver_v1(inf: string, requestId: string, boundMs: string): Promise<unknown>;
  fg_lower_inflight_v3(inf: string, token: string): Promise<unknown>;
  fg_drop_inflight_v2(
    inf: string,
    channel: string,
    maxBoundMs: string,
    ...sessions: string[]
  ): Promise<unknown>;
  fg_inflight_forget_v1(inf: string, channel: string, floor: string): Promise<unknown>;
  fg_idem_begin_v1(record: string, fingerprint: string, attempt: string, holdMs: string): Promise<unknown>;
  fg_idem_finish_v1(record: string, attempt: string, response: string, ttlMs: string): Promise<unknown>;
  fg_idem_abandon_v1(record: string, attempt: string): Promise<unknown>;
  fg_session_open_v1(sessions: string, id: string, ttlMs: string): Promise<unknown>;
  fg_session_beat_v1(sessions: string, id: string): Promise<unknown>;
  fg_session_end_v1(sessions: string, id: string, expectedBeat: string): Promise<unknown>;
  fg_epoch_init_v1(epoch: string, newId: string): Promise<unknown>;
  fg_epoch_bump_v1(epoch: string, newId: string): Promise<unknown>;
  fg_epoch_verify_v1(
    epoch: string,
    newId: string,
    runId: string,
    atLeast: string,
    promoted: string,
  ): Promise<unknown>;
}

export type FencegateRedis = (Redis | Cluster) & FencegateCommands;

function readScript(file: string): string {
  return readFileSync(new URL(`./scripts/${file}`, import.meta.url), 'utf8');
}

let cache: Map<ScriptName, string> | null = null;

/** lib.lua + the script's file: the exact text sent to Redis. */
export function scriptSource(name: ScriptName): string {
  if (cache === null) {
    const lib = readScript('lib.lua');
    cache = new Map();
    for (const [n, [file]] of Object.entries(SCRIPTS) as [ScriptName, readonly [string, number | null]][]) {
      cache.set(n, `${lib}\n${readScript(file)}`);
    }
  }
  const src = cache.get(name);
  if (src === undefined) throw new Error(`unknown script ${name}`);
  return src;
}

/** The helper library alone, for tests that exercise its functions through EVAL. */
export function libSource(): string {
  return readScript('lib.lua');
}

/** Registers every script but the encoded ones on the client (idempotent per client). */
export function defineScripts(client: Redis | Cluster): FencegateRedis {
  for (const [name, [, numberOfKeys]] of Object.entries(SCRIPTS) as [
    ScriptName,
    readonly [string, number | 'encoded'],
  ][]) {
    if (numberOfKeys !== 'encoded') client.defineCommand(name, { numberOfKeys, lua: scriptSource(name) });
  }
  return client as FencegateRedis;
}
