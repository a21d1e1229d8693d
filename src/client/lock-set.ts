/**
 * Several locks held under one lease (POST /v1/locks/acquire-many): a Lock per key, all
 * with the lease's id, renewed in the background, and one signal that fires as soon as
 * any of them is lost (then all of them count as lost: the work needed every one).
 */
import { FencegateError, LeaseLostError } from './errors.js';
import { asyncDispose, type Lock } from './lock.js';

export class LockSet {
  /** The lease id shared by every lock. */
  readonly leaseId: string;
  readonly owner: string;
  /** Fires when any of the locks is lost, or the set is released: stop the work. */
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private readonly byKey: ReadonlyMap<string, Lock>;

  /** `locks` in canonical order (the issuer's order). */
  constructor(readonly locks: readonly Lock[]) {
    const first = locks[0];
    if (first === undefined) throw new FencegateError('a lock set needs at least one lock', 0, null);
    this.leaseId = first.leaseId;
    this.owner = first.owner;
    this.byKey = new Map(locks.map((l) => [l.key, l]));
    this.signal = this.controller.signal;
    for (const l of locks) {
      if (l.signal.aborted) this.end(l.signal.reason);
      else l.signal.addEventListener('abort', () => this.end(l.signal.reason), { once: true });
    }
  }

  /** The lock of `key`; throws if the set does not hold it. */
  lock(key: string): Lock {
    const l = this.byKey.get(key);
    if (l === undefined) throw new FencegateError(`this lock set does not hold "${key}"`, 0, null);
    return l;
  }

  /** The keys, in canonical order. */
  get keys(): string[] {
    return this.locks.map((l) => l.key);
  }

  /** True once any lock is lost (judged by the clock now) or the set was released. */
  get lost(): boolean {
    for (const l of this.locks) if (l.lost) this.end(l.signal.reason);
    return this.signal.aborted;
  }

  /** Throws if any lock is lost: call between steps of long work. */
  throwIfLost(): void {
    if (this.lost) throw this.signal.reason;
  }

  /**
   * Releases every lock. true when each was released; false when the issuer said one was
   * no longer held (it lapsed). Throws the first failure of a release that could not be made.
   */
  async release(): Promise<boolean> {
    const results = await Promise.allSettled(this.locks.map((l) => l.release()));
    const failed = results.find((r) => r.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    return results.every((r) => r.status === 'fulfilled' && r.value);
  }

  async [asyncDispose](): Promise<void> {
    await this.release();
  }

  /** One lock ended: the set ends with its reason, and so does every other lock. */
  private end(reason: unknown): void {
    if (this.signal.aborted) return;
    this.controller.abort(
      reason instanceof Error ? reason : new LeaseLostError('a lock of the set was lost', 0, null),
    );
    for (const l of this.locks) if (!l.signal.aborted) l.abandon(this.signal.reason as FencegateError);
  }
}
