/**
 * The fenced write path's two store calls, admit and finish, gathered per turn of the
 * event loop and sent as one `fg_fence_batch_v2` script call (scripts/fence_batch.lua).
 *
 * A batch is what a pipeline of single calls would be, run by Redis as one command: the
 * operations apply in call order, each answered as if it ran alone at that point, and the
 * whole batch is atomic. It costs the gateway one command object and one reply to parse
 * for every write of the turn instead of two per write, and Redis one command dispatch,
 * one reply and one AOF write (docs/stores-redis.md, "Fence batches").
 *
 * The global epoch floor. The script gets the floor as an argument (the epoch record is
 * in no lock's hash slot, so a script could not read it in a cluster). The floor last read
 * is passed, and the epoch record is read again right behind the batch on the same
 * connection: Redis runs the two in order, so the read shows the floor as it was at or
 * after the admissions ran. The floor never goes down (ADR 0002), so when the read equals
 * the floor passed, the admissions ran with the current floor; otherwise each admission is
 * told so (`current: false`) and RedisStore.admit undoes and redoes it. With no floor read
 * yet (start, or after a change), the epoch is read first and the batch sent after it.
 *
 * On a Redis Cluster (`slotOf` given) a turn's operations are split by hash slot, one
 * script call per slot (a script's keys must share one slot), and the epoch record lives
 * on another primary than most locks: two connections, no order between them. So the
 * floor is read again only once every batch of the turn was answered, one read for the
 * turn. That read runs after the admissions ran (they ran before their reply was sent),
 * so it shows the floor as it was at or after them: the same argument, with time in place of the connection's order
 * (docs/adr/0021-redis-cluster.md).
 */
import type { AdmitResult } from '../types.js';
import type { LockKeys } from './keys.js';
import { parseAdmitAt, parseFinishAt, ReplyReader } from './replies.js';
import { EncodedScript, isNoScript, RespArgs } from './encoded-script.js';
import { scriptSource, type FencegateRedis } from './scripts.js';

/** fence_batch.lua, called with arguments encoded as they arrive (encoded-script.ts). */
const FENCE_BATCH = new EncodedScript(scriptSource('fg_fence_batch_v2'));

export interface BatchedAdmit {
  result: AdmitResult;
  /**
   * true: the admission ran with the current epoch floor. false: the floor changed (the
   * admission must be undone and redone). An Error: the floor could not be re-read
   * (the admission must be undone and fail).
   */
  current: boolean | Error;
}

type Settle =
  | { admit: true; resolve: (v: BatchedAdmit) => void; reject: (e: unknown) => void }
  | {
      admit: false;
      resolve: (existed: boolean) => void;
      reject: (e: unknown) => void;
    };

/** One turn's operations, encoded (RESP) as the script's KEYS and ARGV as they arrive. */
class Batch {
  readonly keys = new RespArgs();
  readonly channels = new RespArgs();
  readonly ops = new RespArgs();
  readonly settles: Settle[] = [];
  admits = 0;
  private readonly positions = new Map<string, string>();

  /** `slot`: the hash slot of every key of the batch (a cluster), else undefined. */
  constructor(readonly slot?: number) {}

  /** The lock's 1-based position in KEYS (four keys each), as an ARGV string. */
  lock(k: LockKeys): string {
    let pos = this.positions.get(k.inf);
    if (pos === undefined) {
      this.keys.push(k.ctr);
      this.keys.push(k.lease);
      this.keys.push(k.fence);
      this.keys.push(k.inf);
      this.channels.push(k.channel);
      pos = String(this.channels.count);
      this.positions.set(k.inf, pos);
    }
    return pos;
  }

  /** The script's arguments with the global floor `floor`: numkeys, KEYS, then ARGV. */
  args(floor: string): RespArgs {
    const a = new RespArgs();
    a.push(String(this.keys.count));
    a.append(this.keys);
    a.push(floor);
    a.push(String(this.channels.count));
    a.append(this.channels);
    a.append(this.ops);
    return a;
  }
}

/**
 * How long finishes wait for an admission to ride with, at most (ms). Under load the next
 * turn's admissions take them along, so a write costs about one script call instead of
 * two; when no admission comes they go alone after this delay. A finish that waits only
 * keeps its entry counting a little longer: a higher token's write may wait at the drain
 * barrier up to this much longer, never shorter (ADR 0003).
 */
export const FINISH_LINGER_MS = 2;

export class FenceBatcher {
  /** The global epoch floor as last read; null: read it before the next admissions. */
  private floor: string | null = null;
  /** This turn's batches, by hash slot (one batch, under slot -1, on a single server). */
  private pending: Map<number, Batch> | null = null;
  private pendingAdmits = 0;
  /** Armed while the pending batch holds finishes only; an admission flushes at once instead. */
  private linger: NodeJS.Timeout | null = null;
  private immediate = false;
  /**
   * A batch is at Redis (sent, not yet answered). The next one waits for its answer, and
   * grows meanwhile: under load a script call carries more writes, and Redis (one AOF
   * fsync per turn of its event loop) syncs less often per write. Idle, nothing waits.
   */
  private sending = 0;

  constructor(
    private readonly redis: FencegateRedis,
    private readonly epochKey: string,
    /** Reads the epoch's floor (recreating a lost record): the slow path. */
    private readonly readFloor: () => Promise<string>,
    /** A Redis Cluster: the hash slot of a lock's keys. null: one server. */
    private readonly slotOf: ((k: LockKeys) => number) | null = null,
  ) {}

  admit(
    k: LockKeys,
    token: string,
    check: string,
    requestId: string,
    session: string,
    record: boolean | 'shadow',
    boundMs: number,
  ): Promise<BatchedAdmit> {
    const b = this.batch(k, false);
    const ops = b.ops;
    ops.push('a');
    ops.push(b.lock(k));
    ops.push(token);
    ops.push(check);
    ops.push(requestId);
    ops.push(session);
    ops.push(record === 'shadow' ? 's' : record ? '1' : '0');
    ops.push(String(boundMs));
    b.admits++;
    this.pendingAdmits++;
    if (!this.immediate) {
      this.immediate = true;
      setImmediate(this.flush);
    }
    return new Promise<BatchedAdmit>((resolve, reject) => b.settles.push({ admit: true, resolve, reject }));
  }

  /** Removes an in-flight entry; true when it existed. */
  finish(k: LockKeys, requestId: string): Promise<boolean> {
    const b = this.batch(k, true);
    const ops = b.ops;
    ops.push('f');
    ops.push(b.lock(k));
    ops.push(requestId);
    return new Promise<boolean>((resolve, reject) => b.settles.push({ admit: false, resolve, reject }));
  }

  /** Forgets the floor: the next admissions read the epoch first. */
  floorChanged(): void {
    this.floor = null;
  }

  /** Sends what is pending now, even behind a batch in flight (the store is closing). */
  flushNow(): void {
    this.sending = 0;
    this.flush();
  }

  /** The pending batch of k's slot; a new turn begun by a finish waits a little for admissions. */
  private batch(k: LockKeys, byFinish: boolean): Batch {
    let turn = this.pending;
    if (turn === null) {
      turn = this.pending = new Map();
      if (byFinish) this.linger = setTimeout(this.lingered, FINISH_LINGER_MS);
    }
    const slot = this.slotOf === null ? -1 : this.slotOf(k);
    let b = turn.get(slot);
    if (b === undefined) {
      b = new Batch(slot < 0 ? undefined : slot);
      turn.set(slot, b);
    }
    return b;
  }

  private readonly lingered = (): void => {
    this.linger = null;
    this.flush();
  };

  /** The batch in flight was answered (or failed): send what gathered meanwhile, if due. */
  private readonly sent = (): void => {
    if (this.sending > 0) this.sending--;
    if (this.sending > 0) return; // the rest of the turn's batches
    // Admissions go now; finishes alone once their linger is over (or it never began).
    if (this.pending !== null && (this.pendingAdmits > 0 || this.linger === null)) this.flush();
  };

  private readonly flush = (): void => {
    this.immediate = false;
    if (this.sending > 0) return; // sent() sends it
    const turn = this.pending;
    const admits = this.pendingAdmits;
    this.pending = null;
    this.pendingAdmits = 0;
    if (this.linger !== null) {
      clearTimeout(this.linger);
      this.linger = null;
    }
    if (turn === null) return;
    const batches = [...turn.values()];
    this.sending = batches.length;
    const floor = this.floor;
    if (admits === 0) {
      // Finishes only: no floor involved ('0' is below every floor, and unused).
      this.sendTurn(batches, '0', false);
    } else if (floor !== null) {
      this.sendTurn(batches, floor, true);
    } else {
      // The epoch first (start, or after the floor changed), then the batches behind it.
      this.readFloor().then(
        (read) => {
          this.floor = read;
          this.sendTurn(batches, read, false);
        },
        (err: unknown) => {
          for (const b of batches) {
            this.sent();
            fail(b, err);
          }
        },
      );
    }
  };

  /**
   * Sends a turn's batches with `floor`; `reread`: the floor is read again for the batches
   * with admissions (one server: behind each on the same connection, send()).
   */
  private sendTurn(batches: readonly Batch[], floor: string, reread: boolean): void {
    if (this.slotOf === null) {
      for (const b of batches) this.send(b, floor, reread && b.admits > 0);
      return;
    }
    void this.sendCluster(batches, floor, reread);
  }

  /**
   * A cluster's turn: each slot's script call to its primary at once, and once every reply
   * arrived, one read of the floor for all of them: it runs after every batch's admissions
   * ran (the ordering argument in this module's header), so one read serves the turn (not
   * one per slot, all to the primary that holds the epoch record).
   */
  private async sendCluster(batches: readonly Batch[], floor: string, reread: boolean): Promise<void> {
    const replies = await Promise.all(batches.map((b) => this.callSlot(b, floor)));
    let current: boolean | Error = true;
    const admitted = replies.some((r, i) => r.ok && (batches[i] as Batch).admits > 0);
    // A batch sent again after NOSCRIPT is checked too, as send() does.
    if (admitted && (reread || replies.some((r) => r.resent))) {
      try {
        current = ((await this.redis.hmget(this.epochKey, 'floor'))[0] ?? null) === floor;
        if (!current && this.floor === floor) this.floor = null;
      } catch (err) {
        current = err instanceof Error ? err : new Error(String(err));
      }
    }
    batches.forEach((b, i) => {
      const r = replies[i] as SlotReply;
      this.sent();
      if (r.ok) settle(b, r.value, current);
      else fail(b, r.err);
    });
  }

  /** One slot's script call, sent once more with its source after NOSCRIPT (nothing ran). */
  private async callSlot(b: Batch, floor: string): Promise<SlotReply> {
    for (let resent = false; ; resent = true) {
      try {
        return { ok: true, value: await FENCE_BATCH.call(this.redis, b.args(floor), b.slot), resent };
      } catch (err) {
        if (resent || !isNoScript(err)) return { ok: false, err, resent };
      }
    }
  }

  /**
   * Sends the batch with `floor`; with `withReread`, the epoch's floor is read right behind
   * it on the same connection (issued after the script call, so Redis runs it after).
   * A batch answered NOSCRIPT (nothing ran: SCRIPT FLUSH on the server) is sent once more,
   * with the source, and with its admissions' floor read again behind it.
   */
  private send(b: Batch, floor: string, withReread: boolean, resent = false): void {
    let reply: Promise<unknown>;
    let reread: Promise<(string | null)[]> | null = null;
    // Both commands in one socket write (the connection does not auto-pipeline).
    const stream = ('stream' in this.redis ? this.redis.stream : undefined) as
      { cork?: () => void; uncork?: () => void } | undefined;
    stream?.cork?.();
    try {
      reply = FENCE_BATCH.call(this.redis, b.args(floor));
      if (withReread) reread = this.redis.hmget(this.epochKey, 'floor');
    } catch (err) {
      // Never leave the batcher waiting on a batch that was not sent.
      reread?.catch(() => undefined);
      this.sent();
      fail(b, err);
      return;
    } finally {
      stream?.uncork?.();
    }
    reply.then(
      async (value) => {
        let current: boolean | Error = true;
        if (reread !== null) {
          try {
            current = ((await reread)[0] ?? null) === floor;
            if (!current && this.floor === floor) this.floor = null;
          } catch (err) {
            current = err instanceof Error ? err : new Error(String(err));
          }
        }
        this.sent();
        settle(b, value, current);
      },
      (err: unknown) => {
        reread?.catch(() => undefined);
        if (!resent && isNoScript(err)) {
          this.send(b, floor, b.admits > 0, true);
          return;
        }
        this.sent();
        fail(b, err);
      },
    );
  }
}

type SlotReply = { ok: true; value: unknown; resent: boolean } | { ok: false; err: unknown; resent: boolean };

function settle(b: Batch, value: unknown, current: boolean | Error): void {
  let r: ReplyReader;
  try {
    r = new ReplyReader(value, 'fg_fence_batch_v2');
  } catch (err) {
    fail(b, err);
    return;
  }
  let at = 0;
  for (const s of b.settles) {
    try {
      if (s.admit) {
        const result = parseAdmitAt(r, at);
        at += 3;
        s.resolve({ result, current });
      } else {
        const existed = parseFinishAt(r, at);
        at += 1;
        s.resolve(existed);
      }
    } catch (err) {
      s.reject(err);
      at += s.admit ? 3 : 1;
    }
  }
}

function fail(b: Batch, err: unknown): void {
  for (const s of b.settles) s.reject(err);
}
