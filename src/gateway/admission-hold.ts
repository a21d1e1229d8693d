/**
 * Admission holds: one store admission serves a lock holder's next writes with the same
 * token, on this process, for a short while (docs/adr/0016-admission-holds.md).
 *
 * A recorded admission leaves an in-flight entry in the store, and while that entry lives
 * no higher token's write leaves any gateway (the drain barrier), nothing lower is
 * admitted (the fence), and an equal token never waits. So as long as the entry lives, a
 * further write with the same token on the same lock would be admitted by the store and
 * would clear the barrier at once: the store round trip teaches nothing. A hold keeps the
 * entry open after the write that made it, and lets such writes join it without asking:
 *
 * - it opens only after its own write cleared the barrier and its entry is delivering
 *   (it carries the write's delivery bound: the lock-delay, docs/adr/0018), under a
 *   session lease that is still valid, and only for `check: token` and `check: sequencer`
 *   routes (a `lease` route wants the lease's liveness judged by the store for every write);
 * - a write joins only with the same token and the same, still valid, session lease, a
 *   delivery bound no longer than the entry's (routes of one lock may differ),
 *   and only within `holdMs` of the admission that opened it, or, while the renewal the
 *   hold asked for in its second half is still unanswered, within 2 × `holdMs` (so that a
 *   slow store answer, an fsync stall, does not send the holder's writes to wait for it);
 * - the store entry is finished when the hold is closed and its last write is over:
 *   `holdMs` after it opened (or when its renewal is answered, 2 × `holdMs` at most), at
 *   once when a write with another token (or under another session) comes for its lock,
 *   and when the session lapses (its entries stop counting anyway, and nothing joins an
 *   invalid lease).
 *
 * A joined write is therefore exactly a write the store admitted up to `holdMs` (2 ×
 * `holdMs` with a renewal under way) earlier and that waited in this process before being
 * forwarded, with its entry counting all the while, which the barrier already allows for
 * any write (a full upstream pool, a slow upload). What it changes: a higher token
 * admitted meanwhile waits at the barrier up to that long (plus the joined writes' own
 * time at the upstream) instead of only for the writes in flight when it came, and the
 * holder's writes in that time are applied before it, as if they had arrived that much
 * earlier.
 */
import type { FencingToken } from '../tokens.js';
import type { SessionLease } from './session.js';

/** The default hold, in ms: long enough to span a busy holder's next writes, short next to a lock handover. */
export const ADMISSION_HOLD_MS = 50;

/**
 * Open holds at most, one per lock. Each lasts `holdMs` (2 × `holdMs` while renewing), so
 * only a burst of more distinct locks than this within that time reaches it; then the
 * hold opened longest ago is closed (its lock's next write asks the store again).
 */
export const ADMISSION_HOLDS_KEPT = 10_000;

/**
 * A fresh store admission of `token` on `lock` under `lease`, with delivery bound
 * `boundMs`, made in the background to renew a busy hold: the store's highest and how to
 * finish the new entry, or null when the store did not admit it (or had lower-token
 * writes in flight, so that the entry would not be delivering), or failed.
 */
export type Renew = (
  lock: string,
  token: FencingToken,
  lease: SessionLease,
  boundMs: number,
) => Promise<{ highest: FencingToken; finish: () => void } | null>;

/** One store admission's in-flight entry, shared by the writes that joined it. */
export interface Hold {
  readonly lock: string;
  readonly token: FencingToken;
  readonly lease: SessionLease;
  /** The store's highest after the admission (the verdict of a write that joins). */
  readonly highest: FencingToken;
  /** The delivery bound its store entry carries once delivering (ms). */
  readonly boundMs: number;
}

interface HoldState extends Hold {
  /** Finishes the store entry; called once, when the hold is closed and has no writes. */
  readonly finish: () => void;
  /** Writes using the entry (the admitting one included) not yet over. */
  users: number;
  /** In `byLock`: writes may join. */
  open: boolean;
  /** No longer joinable: the entry is finished once `users` is 0. */
  closed: boolean;
  /** performance.now() from which nothing joins (the timer that closes it may run late). */
  until: number;
  /** A renewal of this hold was asked for (once per hold). */
  renewing: boolean;
  /** That renewal has not been answered yet: the hold may be joined up to `holdMs` past `until`. */
  pending: boolean;
}

export class AdmissionHolds {
  private readonly byLock = new Map<string, HoldState>();
  /**
   * Renewals asked for within this long of each other are made together: their fresh
   * admissions reach the store in one call, and since they then open (and fall due)
   * together, a process's busy locks keep renewing in one store call per round instead
   * of one each. On Redis with `appendfsync always` each call is an AOF write and fsync,
   * so the store's CPU per fenced write follows the calls more than the admissions.
   */
  private readonly tickMs: number;
  /** Holds whose renewal was asked for since the last tick. */
  private due: HoldState[] = [];
  private tick: NodeJS.Timeout | null = null;

  /**
   * `holdMs` 0: every write asks the store, and its entry is finished when it is over.
   * With `renew`, a hold that a write joins in the second half of its time is renewed in
   * the background by a fresh admission (at the next tick, `holdMs`/8 at most, together
   * with the other locks' renewals due by then), which replaces it when the store admits
   * it: a lock written to steadily keeps a hold (each at most `holdMs` old) without its
   * writes waiting for the store.
   */
  constructor(
    readonly holdMs: number,
    private readonly renew: Renew | null = null,
    readonly capacity: number = ADMISSION_HOLDS_KEPT,
  ) {
    if (!Number.isInteger(holdMs) || holdMs < 0) throw new RangeError('holdMs must be an integer ≥ 0');
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('capacity must be an integer ≥ 1');
    this.tickMs = Math.max(1, Math.floor(holdMs / 8));
  }

  /** Open holds (≤ capacity; for tests, status and fencegate_tracked_locks). */
  get size(): number {
    return this.byLock.size;
  }

  /**
   * The hold a write of `token` on `lock` under `lease`, with delivery bound `boundMs`, may
   * join (counted as one more user), or null: ask the store. A hold that such a write
   * cannot join (another token, another session, a lapsed lease) is closed, so that its
   * entry does not hold back what comes next; one whose entry's bound is shorter than the
   * write's stays for the writes it covers.
   */
  join(lock: string, token: FencingToken, lease: SessionLease, boundMs: number): Hold | null {
    const hold = this.byLock.get(lock);
    if (hold === undefined) return null;
    const now = performance.now();
    if (hold.token !== token || hold.lease !== lease || !lease.valid || now >= this.joinableUntil(hold)) {
      this.close(hold);
      return null;
    }
    if (hold.boundMs < boundMs) return null;
    hold.users += 1;
    if (this.renew !== null && !hold.renewing && now >= hold.until - this.holdMs / 2) this.askRenewal(hold);
    return hold;
  }

  /**
   * A write the store admitted (recording an entry finished by `finish`, with delivery
   * bound `boundMs` once delivering): its hold, not yet open to others. `leave` it when
   * the write is over; `open` it once it cleared the barrier and its entry is delivering,
   * to let the same token's next writes join.
   */
  admitted(
    lock: string,
    token: FencingToken,
    lease: SessionLease,
    highest: FencingToken,
    finish: () => void,
    boundMs: number,
  ): Hold {
    const hold: HoldState = {
      lock,
      token,
      lease,
      highest,
      boundMs,
      finish,
      users: 1,
      open: false,
      closed: false,
      until: 0,
      renewing: false,
      pending: false,
    };
    return hold;
  }

  /** Lets writes join `hold` for `holdMs` (a no-op when holds are off or the lock already has one). */
  open(h: Hold): void {
    const hold = h as HoldState;
    if (this.holdMs === 0 || hold.open || hold.closed || !hold.lease.valid) return;
    const current = this.byLock.get(hold.lock);
    if (current !== undefined) {
      // Another write of this process opened one first (same token: keep it; else it is superseded).
      if (current.token === hold.token && current.lease === hold.lease) return;
      this.close(current);
    }
    this.install(hold);
  }

  /** A write using `hold` is over: the entry is finished when it was the last and the hold is closed (or never opened). */
  leave(h: Hold): void {
    const hold = h as HoldState;
    hold.users -= 1;
    if (hold.users === 0 && (hold.closed || !hold.open)) this.finish(hold);
  }

  private install(hold: HoldState): void {
    // At the bound, the hold opened (or renewed) longest ago gives way: closing one only
    // sends its lock's next write to the store.
    while (this.byLock.size >= this.capacity && !this.byLock.has(hold.lock)) {
      const oldest = this.byLock.values().next();
      if (oldest.done === true) break;
      this.close(oldest.value);
    }
    hold.open = true;
    hold.until = performance.now() + this.holdMs;
    this.byLock.set(hold.lock, hold);
    this.closeAt(hold, this.holdMs);
  }

  /** Until when writes may join `hold`: its time, or another `holdMs` while its renewal is unanswered. */
  private joinableUntil(hold: HoldState): number {
    return hold.pending ? hold.until + this.holdMs : hold.until;
  }

  /** Closes `hold` once it may no longer be joined (checked again when the timer fires). */
  private closeAt(hold: HoldState, ms: number): void {
    setTimeout(() => {
      if (hold.closed) return;
      const left = this.joinableUntil(hold) - performance.now();
      if (left > 0) this.closeAt(hold, left);
      else this.close(hold);
    }, ms).unref();
  }

  /** Renews `hold` at the next tick, with whatever else falls due until then. */
  private askRenewal(hold: HoldState): void {
    hold.renewing = true;
    hold.pending = true;
    this.due.push(hold);
    if (this.tick === null) {
      this.tick = setTimeout(this.renewDue, this.tickMs);
      this.tick.unref();
    }
  }

  private readonly renewDue = (): void => {
    this.tick = null;
    const due = this.due;
    this.due = [];
    const renew = this.renew;
    if (renew === null) return;
    // A hold closed meanwhile (its time, another token or session) is not renewed.
    for (const hold of due) {
      if (this.byLock.get(hold.lock) === hold) this.renewInBackground(hold, renew);
      else hold.pending = false;
    }
  };

  /**
   * Renews `hold`: the fresh admission replaces it if it is still the lock's open hold.
   * Otherwise (it ran out, or another token or session came for the lock, whose write
   * the fresh entry would only hold back at the barrier) the fresh entry is finished. A
   * renewal refused or failed leaves the hold its own time: closed at once if that is over.
   */
  private renewInBackground(hold: HoldState, renew: Renew): void {
    const refused = () => {
      hold.pending = false;
      if (performance.now() >= hold.until) this.close(hold);
    };
    renew(hold.lock, hold.token, hold.lease, hold.boundMs).then((next) => {
      if (next === null) return refused();
      hold.pending = false;
      if (this.byLock.get(hold.lock) !== hold || !hold.lease.valid) {
        next.finish();
        return;
      }
      this.close(hold);
      this.install({ ...hold, ...next, users: 0, closed: false, renewing: false, pending: false });
    }, refused);
  }

  /** No more joins; the entry is finished once its writes are over. */
  private close(hold: HoldState): void {
    if (hold.closed) return;
    hold.closed = true;
    if (this.byLock.get(hold.lock) === hold) this.byLock.delete(hold.lock);
    if (hold.users === 0) this.finish(hold);
  }

  private finish(hold: HoldState): void {
    hold.closed = true;
    hold.users = -1; // finished: a late leave() cannot finish twice
    hold.finish();
  }
}
