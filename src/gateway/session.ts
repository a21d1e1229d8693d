/**
 * Gateway sessions: what keeps this process's in-flight entries counting at the drain
 * barrier, and decides when they stop (docs/adr/0005-gateway-sessions.md).
 *
 * Each gateway process holds a session in the store: an id and a beat counter, bumped
 * every `beatMs`. An in-flight entry belongs to the session under which it was admitted
 * and has no deadline of its own: it counts until it is finished or until the session
 * ends. Nobody's wall clock and not the store's clock decide anything here:
 *
 * - Observers (SessionObserver, in every gateway) end a session only after they have
 *   seen its beat unchanged for `ttlMs` of their own monotonic clock, counted from when
 *   they first *received* that beat value, and only with a compare-and-delete on that
 *   beat. So the session's last successful beat was *sent* at least `ttlMs` before it is
 *   ended.
 * - The owner (this module) treats a session as valid until the send time of its last
 *   acknowledged beat plus `ttlMs − marginMs` on its monotonic clock. Past that it
 *   forwards nothing under it (checked before a request is written upstream and before
 *   every body chunk, see forward-guard.ts) and aborts what is still streaming.
 *
 * Hence the owner has stopped before anyone can end its session, as long as the two
 * monotonic clocks advance at rates within marginMs/ttlMs of each other. A paused
 * process, a slow upload, a full connection pool or a store clock step change nothing:
 * a live gateway keeps its entries, a dead one loses them `ttlMs` after its last beat.
 *
 * When an observer ended this process's session (it was paused, or cut off from the
 * store), the next beat finds it gone: a new session is opened for new admissions.
 * Entries under the old one are void; their requests are refused or cut.
 */
import { randomUUID } from 'node:crypto';
import { ProblemError } from '../errors.js';
import type { Metrics } from '../observe/metrics.js';
import type { Store } from '../store/types.js';

export interface SessionSettings {
  /** How long observers let a beat stay unchanged before ending the session. Default 6000. */
  ttlMs?: number;
  /** Heartbeat interval. Default ttlMs / 6. */
  beatMs?: number;
  /** Safety margin the owner keeps below ttlMs. Default ttlMs / 4. */
  marginMs?: number;
}

export const SESSION_DEFAULTS = Object.freeze({ ttlMs: 6000 });

/**
 * Finishes that failed (the store unreachable) remembered for retrying, at most. Past it,
 * the session is given up at the next beat instead (see finishLater): its entries stop
 * counting once it is ended, so nothing needs remembering one by one.
 */
export const UNFINISHED_KEPT = 100_000;

export interface SessionLog {
  warn(obj: object, msg: string): void;
  info?(obj: object, msg: string): void;
}

type Abort = () => void;

/** One session id: valid until a monotonic instant that each acknowledged beat extends. */
export class SessionLease {
  /** performance.now() after which nothing may be forwarded under this session. */
  validUntil = -Infinity;
  ended = false;
  /**
   * The tracked forwards, in slots that are reused: a slot is cleared when its forward
   * is over and taken by a later one. Not a Set: a lease lives long, so its Set's table
   * sat in the old generation, where V8 allocates each rebuilt table (one per few dozen
   * requests under churn) directly; those dead tables still pointed at the forwards they
   * held, and V8's young collections treat such old-to-young pointers as live until the
   * next full collection. Every forward's request graph was promoted that way: ~20 MB/s
   * of old generation at 3 500 fenced writes/s, a full collection every ~2 s.
   */
  private readonly forwards: (Abort | undefined)[] = [];
  private readonly freeSlots: number[] = [];

  constructor(readonly id: string) {}

  get valid(): boolean {
    return !this.ended && performance.now() < this.validUntil;
  }

  /** Registers a forward to abort when the session lapses; returns the unregister function. */
  track(abort: Abort): () => void {
    const slot = this.freeSlots.pop() ?? this.forwards.length;
    this.forwards[slot] = abort;
    return () => {
      // Already aborted (and the slot maybe reused since), or unregistered before.
      if (this.forwards[slot] !== abort) return;
      this.forwards[slot] = undefined;
      this.freeSlots.push(slot);
    };
  }

  /** Forwards tracked now (for tests). */
  get tracked(): number {
    return this.forwards.length - this.freeSlots.length;
  }

  /** Aborts every tracked forward (the session lapsed or ended). */
  abortAll(): void {
    const all = this.forwards.filter((abort) => abort !== undefined);
    this.forwards.length = 0;
    this.freeSlots.length = 0;
    for (const abort of all) abort();
  }
}

/** Runs this process's session: open, beat, lapse, rotate, close. */
export class GatewaySessions {
  readonly ttlMs: number;
  private readonly beatMs: number;
  private readonly marginMs: number;
  private lease: SessionLease | null = null;
  private beatTimer: NodeJS.Timeout | null = null;
  private lapseTimer: NodeJS.Timeout | null = null;
  private closed = false;
  private lastStoreNow: number | null = null;
  private lastSentAt = 0;
  /** Finishes that failed (store unreachable): retried after each beat, so no entry is left behind. */
  private readonly unfinished = new Map<string, { lock: string; requestId: string }>();
  /** More finishes failed than `unfinishedKept`: the session is given up at the next tick. */
  private unfinishedOverflow = false;
  /** Told when the store forgot this process's session while it was valid (reset-hold.ts). */
  private readonly lossListeners = new Set<(reason: string) => void>();

  constructor(
    private readonly store: Store,
    private readonly metrics: Metrics,
    private readonly log: SessionLog,
    settings: SessionSettings = {},
    private readonly unfinishedKept: number = UNFINISHED_KEPT,
  ) {
    this.ttlMs = settings.ttlMs ?? SESSION_DEFAULTS.ttlMs;
    this.beatMs = settings.beatMs ?? Math.max(10, Math.floor(this.ttlMs / 6));
    this.marginMs = settings.marginMs ?? Math.floor(this.ttlMs / 4);
    if (!(this.marginMs > 0 && this.marginMs < this.ttlMs && this.beatMs < this.ttlMs - this.marginMs)) {
      throw new RangeError('session settings need 0 < marginMs < ttlMs and beatMs < ttlMs - marginMs');
    }
  }

  /** Opens the first session (best effort: if the store is down, beats keep trying). */
  async start(): Promise<void> {
    await this.tick();
  }

  /** The session to admit under, or null when this process has no valid session now. */
  current(): SessionLease | null {
    const lease = this.lease;
    return lease !== null && lease.valid ? lease : null;
  }

  /**
   * Calls `listener` when a beat finds this process's session gone although it was still
   * valid: no observer can have ended it (ADR 0005), so the store lost it (flushed,
   * restored, failed over), and with it the in-flight entries of the drain barrier.
   */
  onStoreLoss(listener: (reason: string) => void): () => void {
    this.lossListeners.add(listener);
    return () => this.lossListeners.delete(listener);
  }

  /**
   * An entry whose finish failed; finished again after the next successful beat. Bounded:
   * past `unfinishedKept` such entries (a long outage under load) none is added, and at the
   * next tick the session is given up: ended (best effort; else observers end it once it no
   * longer beats), its forwards cut, the remembered finishes dropped, a new session opened.
   * An ended session's entries stop counting at the barrier (a delivering one after its
   * lock-delay), so no entry is left holding a lock back, and memory stays bounded.
   */
  finishLater(lock: string, requestId: string): void {
    const key = `${requestId}\0${lock}`;
    if (this.unfinished.size >= this.unfinishedKept && !this.unfinished.has(key)) {
      this.unfinishedOverflow = true;
      return;
    }
    this.unfinished.set(key, { lock, requestId });
  }

  /** Finishes waiting to be retried (≤ unfinishedKept; for tests and fencegate_tracked_locks). */
  get unfinishedCount(): number {
    return this.unfinished.size;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.beatTimer !== null) clearTimeout(this.beatTimer);
    if (this.lapseTimer !== null) clearTimeout(this.lapseTimer);
    const lease = this.lease;
    this.lease = null;
    if (lease === null) return;
    lease.ended = true;
    lease.abortAll();
    try {
      await this.store.endSession(lease.id, null);
    } catch (err) {
      this.log.warn({ err, session: lease.id }, 'could not end the gateway session; other gateways will');
    }
  }

  private schedule(): void {
    if (this.closed) return;
    this.beatTimer = setTimeout(() => void this.tick(), this.beatMs);
    this.beatTimer.unref();
  }

  private async tick(): Promise<void> {
    try {
      if (this.unfinishedOverflow) await this.giveUp();
      if (this.lease === null || this.lease.ended) await this.open();
      else await this.beat(this.lease);
      await this.retryFinishes();
    } catch (err) {
      // The failed store call is counted by the instrumented store (fencegate_store_errors_total).
      if (this.lease !== null && !this.lease.valid) {
        this.log.warn({ err }, 'gateway session beat failed; fenced writes wait for the store');
      }
    } finally {
      this.schedule();
    }
  }

  private async open(): Promise<void> {
    const lease = new SessionLease(randomUUID());
    const sent = performance.now();
    await this.store.openSession(lease.id, this.ttlMs);
    if (this.closed) {
      await this.store.endSession(lease.id, null);
      return;
    }
    this.lease = lease;
    this.extend(lease, sent);
  }

  /**
   * Too many finishes failed to remember them all: this session stops (nothing more is
   * admitted or forwarded under it), its remembered finishes are dropped, and it is ended
   * in the store if the store answers (else the observers end it once its beat stops).
   */
  private async giveUp(): Promise<void> {
    this.unfinishedOverflow = false;
    this.unfinished.clear();
    const lease = this.lease;
    if (lease === null || lease.ended) return;
    lease.ended = true;
    lease.abortAll();
    this.log.warn(
      { session: lease.id, unfinished: this.unfinishedKept },
      'more fenced writes could not be finished in the store than this gateway remembers; ' +
        'giving up its session (its entries stop counting once it is ended) and opening a new one',
    );
    await this.store.endSession(lease.id, null).catch(() => false);
  }

  private async beat(lease: SessionLease): Promise<void> {
    const sent = performance.now();
    const result = await this.store.beatSession(lease.id);
    if (!result.alive) {
      // Ended by an observer, this lease had lapsed by construction; if it had not, the
      // store itself lost the session.
      if (lease.valid) {
        const reason =
          'the store no longer knew this gateway’s live session (flushed, restored or failed over)';
        for (const listener of [...this.lossListeners]) listener(reason);
      }
      lease.ended = true;
      lease.abortAll();
      this.metrics.sessionsLost.inc();
      this.log.warn(
        { session: lease.id },
        'this gateway session was ended by another gateway (paused or cut off for longer than its TTL); ' +
          'writes admitted under it are void; opening a new session',
      );
      await this.open();
      return;
    }
    this.checkStoreClock(sent, result.now);
    this.extend(lease, sent);
  }

  private extend(lease: SessionLease, sent: number): void {
    lease.validUntil = Math.max(lease.validUntil, sent + this.ttlMs - this.marginMs);
    this.armLapse(lease);
  }

  private armLapse(lease: SessionLease): void {
    if (this.lapseTimer !== null) clearTimeout(this.lapseTimer);
    // +1: a timer may fire a fraction of a millisecond before performance.now() gets there.
    const delay = Math.max(0, lease.validUntil - performance.now()) + 1;
    this.lapseTimer = setTimeout(() => this.lapse(lease), delay);
    this.lapseTimer.unref();
  }

  private lapse(lease: SessionLease): void {
    if (lease !== this.lease || lease.ended) return;
    if (lease.valid) {
      this.armLapse(lease);
      return;
    }
    this.log.warn(
      { session: lease.id },
      'gateway session lapsed (no beat acknowledged in time): in-flight fenced writes are cut',
    );
    lease.abortAll();
  }

  /**
   * The store clock moving far from this process's monotonic clock between two beats is
   * reported (leases are judged by the store's clock); the barrier does not depend on it.
   */
  /**
   * The store's clock now, estimated from the last acknowledged beat: its store time plus
   * the time elapsed here since that beat was *sent*. The store read its clock after the
   * send, so the estimate errs late (by up to one round trip), never early. Null before
   * the first beat.
   */
  storeTime(): number | null {
    return this.lastStoreNow === null ? null : this.lastStoreNow + (performance.now() - this.lastSentAt);
  }

  private checkStoreClock(sent: number, storeNow: number): void {
    const last = this.lastStoreNow;
    const lastSent = this.lastSentAt;
    this.lastStoreNow = storeNow;
    this.lastSentAt = sent;
    if (last === null) return;
    const drift = storeNow - last - (sent - lastSent);
    if (Math.abs(drift) > Math.max(1000, this.ttlMs)) {
      this.metrics.storeClockJumps.inc();
      this.log.warn(
        { driftMs: Math.round(drift) },
        'the store clock jumped relative to this process: leases may end early or late ' +
          '(the drain barrier does not depend on the store clock)',
      );
    }
  }

  /** All at once (on Redis they travel in one fence batch); a failed one stays for the next beat. */
  private async retryFinishes(): Promise<void> {
    if (this.unfinished.size === 0) return;
    const tries = [...this.unfinished].map(([k, { lock, requestId }]) =>
      this.store.finish(lock, requestId).then(() => this.unfinished.delete(k)),
    );
    const failed = (await Promise.allSettled(tries)).find((t) => t.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
  }
}

/**
 * The answer to a write whose gateway session stopped being valid before it was fully
 * sent: 503 when the upstream cannot have the whole request (it was never sent, or cut
 * mid-body), 502 forward-interrupted when it may have it (and may apply it).
 */
export function sessionLapsed(lock: string | null, upstreamMayHaveIt = false): ProblemError {
  const extra = lock === null ? {} : { lock };
  if (upstreamMayHaveIt) {
    return new ProblemError(
      'forward-interrupted',
      'this gateway lost its session with the fence store while forwarding and cut the request; ' +
        'the upstream may or may not have applied it',
      extra,
    );
  }
  return new ProblemError(
    'fence-unavailable',
    'this gateway lost its session with the fence store; the write was not forwarded whole',
    extra,
    { headers: { 'retry-after': '1' } },
  );
}
