/**
 * The messages between the primary and its workers (node:cluster's IPC channel), and
 * the primary's request/answer helper. docs/adr/0008-workers.md.
 *
 * worker → primary: ready (its data listener is bound), failed (it could not start),
 * events (fenced-write and drain events, batched), answer (to an ask).
 * primary → worker: ask (metrics, breakers, reload the policy or the sequencer keys),
 * shutdown (drain and exit).
 */
import type { Worker } from 'node:cluster';
import type { ServeConfig } from '../config.js';
import type { EventInput } from '../observe/events.js';

/** The environment variable that makes a forked `fencegate serve` a worker, and gives it its config. */
export const WORKER_ROLE_ENV = 'FENCEGATE_WORKER_ROLE';

/** What a worker is told at fork: its slot (1…N, kept across restarts) and the primary's config. */
export interface WorkerRole {
  slot: number;
  config: ServeConfig;
}

export type Question = 'metrics' | 'breakers' | 'reload' | 'reload-keys' | 'reload-tls';

export type { BreakerSnapshot } from '../breakers/board.js';

export interface ReloadAnswer {
  policy: boolean;
  /** formatPolicyError lines when the worker's reload failed. */
  errors: string[];
}

export type ToWorker = { fg: 'ask'; id: number; question: Question } | { fg: 'shutdown' };

export type ToPrimary =
  | { fg: 'ready'; data: string }
  | { fg: 'failed'; message: string }
  | { fg: 'events'; events: EventInput[] }
  | { fg: 'answer'; id: number; value: unknown };

/** One of ours (node:cluster sends its own messages on the same channel). */
function ours(m: unknown): boolean {
  return typeof m === 'object' && m !== null && typeof (m as { fg?: unknown }).fg === 'string';
}

export function isToPrimary(m: unknown): m is ToPrimary {
  return ours(m);
}

export function isToWorker(m: unknown): m is ToWorker {
  return ours(m);
}

/** Asks workers questions and matches their answers; unanswered asks settle as undefined. */
export class Asker {
  private next = 1;
  private readonly pending = new Map<number, { worker: Worker; settle: (v: unknown) => void }>();

  /** The worker's answer, or undefined if it does not answer within `timeoutMs` or goes away. */
  ask(worker: Worker, question: Question, timeoutMs: number): Promise<unknown> {
    const id = this.next++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => settle(undefined), timeoutMs);
      const settle = (value: unknown) => {
        clearTimeout(timer);
        this.pending.delete(id);
        resolve(value);
      };
      this.pending.set(id, { worker, settle });
      try {
        worker.send({ fg: 'ask', id, question } satisfies ToWorker, (err) => {
          if (err) settle(undefined);
        });
      } catch {
        settle(undefined);
      }
    });
  }

  answered(id: number, value: unknown): void {
    this.pending.get(id)?.settle(value);
  }

  /** Settles every ask waiting on `worker` (it exited). */
  forget(worker: Worker): void {
    for (const p of [...this.pending.values()]) if (p.worker === worker) p.settle(undefined);
  }
}
