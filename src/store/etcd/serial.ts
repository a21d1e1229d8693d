/**
 * One operation at a time per lock (or session) in this process. Optimistic
 * transactions on one hot lock conflict with each other: 20 concurrent admissions of one
 * lock through one gateway would each read the same records, one would commit, and
 * nineteen would run again, and again (quadratic, and past the gateway's admission
 * timeout). Queued here, a process sends one transaction per lock at a time, and only
 * another process's transaction on the same lock can make it run again.
 */
export class KeyQueue {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<R>(key: string, op: () => Promise<R>): Promise<R> {
    const before = this.tails.get(key) ?? Promise.resolve();
    const mine = before.then(op, op);
    const tail = mine.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return mine;
  }
}
