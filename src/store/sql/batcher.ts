/**
 * Group commit for the gateway's fence operations on the SQL stores. Admissions and
 * finishes that arrive while the previous batches are still running (or within the
 * same event-loop turn, when none is) are sent together as ONE statement
 * (fences.ts runFenceBatch → schema.sql fence_batch_v2): one round trip and one
 * commit, so one WAL flush, for all of them, instead of a transaction of five round
 * trips per admission and a commit per finish.
 *
 * What callers see is what they saw one call at a time: the statement judges the
 * admissions as if run one after another in the order they were called (finishes
 * first: they were called before any admission of the batch could have answered), and
 * a batch that fails fails every call in it with the same StoreUnavailableError,
 * having changed nothing. Batches in flight at the same time are ordered by the
 * database's row locks, like concurrent single calls.
 */
import type { AdmitRequest, AdmitResult } from '../types.js';
import type { FinishRequest } from './fences.js';

export type RunBatch = (
  finishes: readonly FinishRequest[],
  admissions: readonly AdmitRequest[],
) => Promise<AdmitResult[]>;

export interface BatcherOptions {
  /** Batches in flight at once (each holds one connection while it runs). */
  parallel: number;
  /** At most this many calls (admissions and finishes) per batch. */
  maxBatch: number;
}

interface Waiting<T, V> {
  req: T;
  resolve: (value: V) => void;
  reject: (err: unknown) => void;
}

export class FenceBatcher {
  private admissions: Waiting<AdmitRequest, AdmitResult>[] = [];
  private finishes: Waiting<FinishRequest, void>[] = [];
  private running = 0;
  private scheduled = false;
  /**
   * A batch that had to leave out a repeat of one of its (lock, requestId): nothing
   * more is sent until it has run, so the repeat runs after it, as called.
   */
  private cut: Promise<void> | null = null;

  constructor(
    private readonly run: RunBatch,
    private readonly opts: BatcherOptions,
  ) {
    if (opts.parallel < 1 || opts.maxBatch < 1) throw new RangeError('batcher: parallel and maxBatch ≥ 1');
  }

  admit(req: AdmitRequest): Promise<AdmitResult> {
    return new Promise((resolve, reject) => {
      this.admissions.push({ req, resolve, reject });
      this.schedule();
    });
  }

  finish(lock: string, requestId: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.finishes.push({ req: { lock, requestId }, resolve, reject });
      this.schedule();
    });
  }

  /** Calls waiting for a batch (not yet sent). */
  get queued(): number {
    return this.admissions.length + this.finishes.length;
  }

  /**
   * Flushes at the end of this event-loop turn (setImmediate runs after the I/O
   * callbacks of the turn), so requests that arrived together go together.
   */
  private schedule(): void {
    if (this.scheduled || this.running >= this.opts.parallel || this.cut !== null) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    while (this.running < this.opts.parallel && this.queued > 0 && this.cut === null) {
      const finishes = this.finishes.splice(0, this.opts.maxBatch);
      const { taken, repeat } = this.takeAdmissions(this.opts.maxBatch - finishes.length);
      this.running += 1;
      const done: Promise<void> = this.send(finishes, taken).finally(() => {
        this.running -= 1;
        if (this.cut === done) this.cut = null;
        // What queued up while this batch ran goes next: under load, batches grow.
        if (this.queued > 0) this.schedule();
      });
      if (repeat) this.cut = done;
    }
  }

  /**
   * Up to `room` admissions in call order, stopping before one whose (lock, requestId)
   * is already in the batch (`repeat`): the statement records each entry once.
   */
  private takeAdmissions(room: number): { taken: Waiting<AdmitRequest, AdmitResult>[]; repeat: boolean } {
    let n = 0;
    let repeat = false;
    const seen = new Set<string>();
    for (const a of this.admissions) {
      if (n >= room) break;
      const id = `${a.req.lock}\u0000${a.req.requestId}`;
      if (seen.has(id)) {
        repeat = true;
        break;
      }
      seen.add(id);
      n += 1;
    }
    return { taken: this.admissions.splice(0, n), repeat };
  }

  private async send(
    finishes: Waiting<FinishRequest, void>[],
    admissions: Waiting<AdmitRequest, AdmitResult>[],
  ): Promise<void> {
    let results: AdmitResult[];
    try {
      results = await this.run(
        finishes.map((f) => f.req),
        admissions.map((a) => a.req),
      );
    } catch (err) {
      for (const w of finishes) w.reject(err);
      for (const w of admissions) w.reject(err);
      return;
    }
    for (const w of finishes) w.resolve();
    admissions.forEach((w, i) => {
      const result = results[i];
      if (result === undefined) w.reject(new Error('fence batch returned too few verdicts'));
      else w.resolve(result);
    });
  }
}
