/**
 * One transaction per lock (or session) at a time in this process, carrying every
 * operation queued on it meanwhile. Optimistic transactions on one hot lock conflict with
 * each other: 20 concurrent admissions of one lock through one gateway would each read the
 * same records, one would commit, and nineteen would run again, and again (quadratic, and
 * past the gateway's admission timeout). Queued here, a process sends one transaction per
 * lock at a time, and only another process's transaction on the same lock can make it run
 * again. The operations that queued up while one was at etcd go together as the next
 * one (txn.ts, runGroup: in queue order, each seeing the writes of those before it), so
 * under load a lock's writes cost one Raft round per group instead of one each.
 */
import type { GroupOp, Settled } from './txn.js';

/** Operations one group carries at most. */
export const MAX_GROUP = 64;

interface Queued {
  op: GroupOp<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

export class KeyQueue {
  /** Per key: the operations waiting for the next group (present while a group is under way). */
  private readonly waiting = new Map<string, Queued[]>();

  constructor(private readonly runGroup: (ops: readonly GroupOp<unknown>[]) => Promise<Settled<unknown>[]>) {}

  run<R>(key: string, op: GroupOp<R>): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const queued: Queued = { op: op as GroupOp<unknown>, resolve: resolve as (v: unknown) => void, reject };
      const waiting = this.waiting.get(key);
      if (waiting !== undefined) waiting.push(queued);
      else {
        this.waiting.set(key, []);
        this.start(key, [queued]);
      }
    });
  }

  private start(key: string, group: Queued[]): void {
    this.runGroup(group.map((q) => q.op))
      .then(
        (settled) =>
          group.forEach((q, i) => {
            const s = settled[i];
            if (s === undefined) q.reject(new Error('etcd store: an operation of a group got no answer'));
            else if (s.ok) q.resolve(s.value);
            else q.reject(s.error);
          }),
        (err: unknown) => {
          for (const q of group) q.reject(err);
        },
      )
      .finally(() => {
        const waiting = this.waiting.get(key) ?? [];
        if (waiting.length === 0) {
          this.waiting.delete(key);
          return;
        }
        const next = waiting.splice(0, MAX_GROUP);
        this.start(key, next);
      });
  }
}
