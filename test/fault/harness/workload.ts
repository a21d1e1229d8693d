/**
 * The workload driver: K in-process worker loops that acquire one of a few locks with a
 * short TTL, write through a gateway to the sample upstream (PUT /orders/:id with
 * Fencing-Token, X-Request-Id, X-Client-Id), and release. Every grant and every write
 * attempt is recorded in a HistoryRecorder. Bounded by operation count and by time.
 *
 * Some iterations simulate a paused owner in-process (`pauseChance`): the worker sleeps
 * past its lease before writing with its old token, without asking the issuer, so the
 * gateway's fence — not the client — has to keep the stale write out.
 */
import { HistoryRecorder, opId } from './history.js';
import { sleep } from '../../helpers/wait.js';

export interface Endpoint {
  control: string;
  data: string;
}

export interface WorkloadOptions {
  workers: number;
  /** Order ids; the lock of /orders/:id is order:{id}. */
  orderIds: string[];
  ttlMs: number;
  /** How long acquire waits in the lock's queue (default 2 × ttlMs). */
  waitMs?: number;
  /** Stop after this many write attempts in total. */
  maxOps: number;
  /** And stop after this long, whatever the count. */
  maxDurationMs: number;
  /** Where worker w sends its next call; null while its gateway is down. */
  endpoint(worker: number): Endpoint | null;
  /** Chance per lease of sleeping past the TTL before writing (default 0). */
  pauseChance?: number;
  /** Writes per lease, 1… (default 2). */
  writesPerLease?: number;
  /** Writer id prefix (default "w"). */
  writerPrefix?: string;
  /** Extra stop condition, checked between operations. */
  stop?(): boolean;
  /** Called after every write attempt. */
  onWrite?(worker: number, status: number | 'error' | 'timeout', data: string): void;
  /** Writes ask the upstream to apply after up to this many ms (?delayMs; default 30). */
  maxDelayMs?: number;
  /** Client-side timeout for one write (default 20 s). */
  writeTimeoutMs?: number;
}

export interface WorkloadStats {
  attempts: number;
  acknowledged: number;
  refused: number;
  other: number;
  grants: number;
  pauses: number;
}

export async function runWorkload(history: HistoryRecorder, opts: WorkloadOptions): Promise<WorkloadStats> {
  const stats: WorkloadStats = { attempts: 0, acknowledged: 0, refused: 0, other: 0, grants: 0, pauses: 0 };
  const end = Date.now() + opts.maxDurationMs;
  const done = () => stats.attempts >= opts.maxOps || Date.now() > end || (opts.stop?.() ?? false);
  const perLease = Math.max(1, opts.writesPerLease ?? 2);

  const worker = async (w: number) => {
    const writer = `${opts.writerPrefix ?? 'w'}${w}`;
    let i = 0;
    while (!done()) {
      const id = opts.orderIds[(w + i++) % opts.orderIds.length] as string;
      const lockKey = `order:${id}`;
      const ep = opts.endpoint(w);
      if (ep === null) {
        await sleep(50);
        continue;
      }
      const lock = await history.acquire(ep.control, lockKey, writer, {
        ttlMs: opts.ttlMs,
        waitMs: opts.waitMs ?? opts.ttlMs * 2,
      });
      if (lock === null) {
        await sleep(20);
        continue;
      }
      stats.grants++;
      if (Math.random() < (opts.pauseChance ?? 0)) {
        stats.pauses++;
        await sleep(opts.ttlMs + 150); // the lease runs out while "paused"
      }
      for (let k = 0; k < perLease && !done(); k++) {
        const target = opts.endpoint(w) ?? ep;
        const delay = Math.floor(Math.random() * (opts.maxDelayMs ?? 30));
        stats.attempts++;
        const r = await history.write({
          data: target.data,
          path: `/orders/${encodeURIComponent(id)}${delay > 0 ? `?delayMs=${delay}` : ''}`,
          lock: lockKey,
          token: lock.fencingToken,
          writer,
          requestId: opId(writer),
          timeoutMs: opts.writeTimeoutMs ?? 20_000,
        });
        if (typeof r.status === 'number' && r.status >= 200 && r.status < 300) stats.acknowledged++;
        else if (r.status === 409 || r.status === 503) stats.refused++;
        else stats.other++;
        opts.onWrite?.(w, r.status, target.data);
      }
      await lock.release().catch(() => false);
    }
  };
  await Promise.all(Array.from({ length: opts.workers }, (_, w) => worker(w)));
  return stats;
}
