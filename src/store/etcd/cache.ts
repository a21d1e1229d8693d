/**
 * The records this process last read or wrote, with their revisions, so an operation can
 * go straight to its commit: one round trip instead of a read and a commit. A cached
 * record is never trusted: the commit compares it with etcd as it compares every read
 * (txn.ts); when anything changed, the commit's failure branch reads the records again in
 * the same round trip, and they replace the cached ones. Bounded; the oldest is dropped.
 */
import type { Read } from './snapshot.js';

/** At most this many records cached (a few hundred bytes each). */
const CACHED = 10_000;

export class RecordCache {
  private readonly records = new Map<string, Read>();

  get(key: string): Read | undefined {
    return this.records.get(key);
  }

  set(key: string, read: Read): void {
    this.records.delete(key); // to the back: the oldest goes first
    this.records.set(key, read);
    if (this.records.size > CACHED) {
      const oldest = this.records.keys().next();
      if (oldest.done !== true) this.records.delete(oldest.value);
    }
  }
}
