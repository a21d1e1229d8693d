/**
 * The sample service's state: an in-memory key/value "orders" table, and the log
 * of every write it applied with the Fencing-Token it arrived with. The log is the
 * upstream's own history: fault tests compare it with what the gateway admitted.
 */
export interface AppliedWrite {
  /** 1, 2, 3… in the order the writes were applied. */
  seq: number;
  at: string;
  method: string;
  id: string;
  /** The Fencing-Token header as received (the gateway forwards the admitted token), or null. */
  fencingToken: string | null;
  /** The gateway's x-fencegate-request-id, when it came through the gateway. */
  requestId: string | null;
  /** The lock that fenced the write (the gateway's x-fencegate-lock, decoded), or null. */
  lock: string | null;
  /** The client's own X-Request-Id, passed through the gateway, or null. */
  clientRequestId: string | null;
  /** The client's X-Client-Id (who claims to write), or null. */
  writer: string | null;
  /** Size of the body applied. */
  bytes: number;
}

export interface Order {
  id: string;
  body: unknown;
  version: number;
}

export class OrderBook {
  private readonly orders = new Map<string, Order>();
  private readonly log: AppliedWrite[] = [];

  constructor(private readonly maxLog = 100_000) {}

  get(id: string): Order | undefined {
    return this.orders.get(id);
  }

  list(): Order[] {
    return [...this.orders.values()];
  }

  /** Applies a write and records it. Returns the order after the write (undefined after DELETE). */
  apply(
    method: string,
    id: string,
    body: unknown,
    meta: Omit<AppliedWrite, 'seq' | 'at' | 'method' | 'id'>,
  ): { existed: boolean; order: Order | undefined } {
    const prior = this.orders.get(id);
    let order: Order | undefined;
    if (method === 'DELETE') {
      this.orders.delete(id);
    } else {
      const merged =
        method === 'PATCH' && isObject(prior?.body) && isObject(body) ? { ...prior.body, ...body } : body;
      order = { id, body: merged, version: (prior?.version ?? 0) + 1 };
      this.orders.set(id, order);
    }
    this.log.push({ seq: this.log.length + 1, at: new Date().toISOString(), method, id, ...meta });
    if (this.log.length > this.maxLog) this.log.splice(0, this.log.length - this.maxLog);
    return { existed: prior !== undefined, order };
  }

  /** Applied writes, oldest first; optionally only those after `sinceSeq`. */
  writes(sinceSeq = 0): AppliedWrite[] {
    return this.log.filter((w) => w.seq > sinceSeq);
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}
