/**
 * The commits of one event-loop turn, sent as one etcd txn: each operation's txn nested
 * in it (etcd 3.3+ runs each nested txn's compares on their own, so one operation's
 * conflict does not fail the others), one Raft round and one gRPC call for all of them,
 * as the Redis and SQL stores batch their fences. An operation whose writes (or wake keys)
 * touch a key another one of the batch writes waits for the next turn: etcd refuses a txn
 * that puts one key twice. A turn with one commit sends it as it is.
 */
import type { IResponseHeader, IResponseOp, ITxnRequest, KVClient } from 'etcd3';

export interface CommitReply {
  header: IResponseHeader;
  succeeded: boolean;
  responses: IResponseOp[];
}

interface Pending {
  req: ITxnRequest;
  writes: ReadonlySet<string>;
  resolve: (reply: CommitReply) => void;
  reject: (err: unknown) => void;
}

export class CommitBatcher {
  private pending: Pending[] = [];
  private scheduled = false;

  constructor(private readonly kv: KVClient) {}

  /** Sends `req` with the other commits of this turn; `writes` are the keys it puts or deletes. */
  commit(req: ITxnRequest, writes: ReadonlySet<string>): Promise<CommitReply> {
    return new Promise((resolve, reject) => {
      this.pending.push({ req, writes, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.scheduled = false;
    const batch: Pending[] = [];
    const later: Pending[] = [];
    const written = new Set<string>();
    for (const p of this.pending) {
      if ([...p.writes].some((k) => written.has(k))) later.push(p);
      else {
        batch.push(p);
        for (const k of p.writes) written.add(k);
      }
    }
    this.pending = later;
    if (later.length > 0) this.schedule();
    if (batch.length === 1) {
      const only = batch[0] as Pending;
      this.kv.txn(only.req).then(only.resolve, only.reject);
      return;
    }
    this.kv.txn({ success: batch.map((p) => ({ request_txn: p.req })) }).then(
      (res) =>
        batch.forEach((p, i) => {
          const own = res.responses[i]?.response_txn;
          if (own === undefined) p.reject(new Error('etcd answered a batch without its nested reply'));
          else p.resolve({ header: res.header, succeeded: own.succeeded, responses: own.responses });
        }),
      (err: unknown) => {
        for (const p of batch) p.reject(err);
      },
    );
  }
}
