/**
 * The etcd store's identity (docs/adr/0019-store-identity.md, docs/adr/0020-etcd-store.md):
 * the cluster id every etcd response carries, and its revision, which in one cluster
 * never goes back (every read is linearizable, so it is at least every revision this
 * process saw committed). Another cluster id (another cluster answers at these
 * addresses, or the data was restored into a new one) or a revision below one already
 * seen (the cluster was restored from an older snapshot under this process) means the
 * state may be older than what was acknowledged: the store raises the epoch before it
 * grants or admits anything more.
 */
import type { IResponseHeader } from 'etcd3';

/** Thrown from a response check: the store must raise the epoch, then run the operation again. */
export class IdentityChanged extends Error {}

export class ClusterIdentity {
  /** The cluster this process verified the epoch on (null until the first answer). */
  cluster: string | null = null;
  /** Members seen answering (ids), for health. */
  readonly members = new Set<string>();
  private revision = 0n;
  /** Why the identity changed, until the epoch was raised for it. */
  changed: string | null = null;

  /**
   * The revision every answer to a request sent now must reach: the highest this process
   * saw answered before sending it. (Not the highest seen by the time the answer comes: a
   * read that overlapped a commit may be ordered before it.)
   */
  floor(): bigint {
    return this.revision;
  }

  /** Checks the answer to a request sent at `sentAt` (floor()); throws IdentityChanged on a change. */
  check(header: IResponseHeader, sentAt: bigint): void {
    const rev = BigInt(header.revision);
    this.members.add(header.member_id);
    if (this.cluster === null) this.cluster = header.cluster_id;
    else if (header.cluster_id !== this.cluster) {
      this.changed ??= `another etcd cluster answers (cluster id ${header.cluster_id}, was ${this.cluster})`;
    }
    if (rev < sentAt) {
      this.changed ??= `the etcd revision went back from ${sentAt} to ${rev} (restored from an older snapshot?)`;
    }
    if (this.changed !== null) throw new IdentityChanged(this.changed);
    if (rev > this.revision) this.revision = rev;
  }

  /** After the epoch was raised on the cluster now answering: that is the one verified. */
  verified(header: IResponseHeader): void {
    this.cluster = header.cluster_id;
    this.revision = BigInt(header.revision);
    this.changed = null;
  }
}
