/**
 * Judging other gateways' sessions (docs/adr/0005-gateway-sessions.md): a session is
 * dead once this process has seen its beat unchanged for the session's own ttlMs on
 * this process's monotonic clock, counted from when it first *received* that beat;
 * it is then ended with a compare-and-delete on that beat, so a beat that lands
 * meanwhile keeps it alive. A session that no longer exists is dead.
 *
 * One observer per process, shared by every write waiting at the drain barrier and by
 * the sweeper that ends crashed gateways' sessions even when nobody waits for them.
 *
 * It also remembers, on its own monotonic clock, when it first knew each session to be
 * gone (it ended it, or found it missing): a gone session's delivering entries count for
 * their lock-delay from then (lock-delay.ts, docs/adr/0018-lock-delay.md). That instant
 * is never earlier than the session's real end, so the delay errs long, never short; a
 * process that forgot it (restarted, or past the memory's bound) starts counting anew.
 */
import type { Store } from '../store/types.js';
import { lockDelayMs } from './lock-delay.js';

/** Gone sessions remembered with the instant this process first knew them gone, at most. */
export const GONE_SESSIONS_KEPT = 10_000;

export interface Judgement {
  /** Sessions that are gone: their in-flight entries no longer count. */
  dead: string[];
  /** When to look again (ms), at the earliest: a live session could be judged dead then. Null: none live. */
  retryInMs: number | null;
}

/** The store calls an observer makes (the StoreGuard's, so a failing store fails fast). */
export type ObserverStore = Pick<Store, 'readSessions' | 'endSession'>;

export interface ObserverLog {
  warn(obj: object, msg: string): void;
}

export class SessionObserver {
  private readonly seen = new Map<string, { beat: number; since: number }>();
  /** Session id → performance.now() when this process first knew it gone; oldest first. */
  private readonly gone = new Map<string, number>();
  private sweepTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly store: ObserverStore,
    private readonly log: ObserverLog,
  ) {}

  /** Judges `ids` (all sessions in the store when null). */
  async judge(ids: readonly string[] | null): Promise<Judgement> {
    const records = await this.store.readSessions(ids);
    const received = performance.now();
    const dead: string[] = [];
    let retryInMs: number | null = null;
    const later = (ms: number) => (retryInMs = retryInMs === null ? ms : Math.min(retryInMs, ms));

    for (const id of ids ?? records.keys()) {
      const record = records.get(id);
      if (record === undefined) {
        this.seen.delete(id);
        this.knowGone(id, received);
        dead.push(id);
        continue;
      }
      const seen = this.seen.get(id);
      if (seen === undefined || seen.beat !== record.beat) {
        this.seen.set(id, { beat: record.beat, since: received });
        later(record.ttlMs);
        continue;
      }
      const waited = received - seen.since;
      if (waited < record.ttlMs) {
        later(record.ttlMs - waited);
        continue;
      }
      if (await this.store.endSession(id, record.beat)) {
        this.seen.delete(id);
        this.knowGone(id, performance.now());
        dead.push(id);
        this.log.warn(
          { session: id, silentMs: Math.round(waited) },
          'ended a gateway session that stopped beating',
        );
      } else {
        later(1); // it beat (or ended) meanwhile: read again
      }
    }
    if (ids === null) {
      for (const id of this.seen.keys()) {
        if (records.has(id)) continue;
        this.seen.delete(id);
        this.knowGone(id, received);
      }
    }
    return { dead, retryInMs };
  }

  /**
   * How much longer (ms) a gone session's entries with delivery bound `boundMs` count:
   * the lock-delay from when this process first knew the session gone; 0 when it passed.
   */
  delayLeft(id: string, boundMs: number): number {
    const delay = lockDelayMs(boundMs);
    if (delay === 0) return 0;
    const now = performance.now();
    const since = this.gone.get(id) ?? this.knowGone(id, now);
    return Math.max(0, since + delay - now);
  }

  /** Gone sessions remembered (for tests). */
  get goneCount(): number {
    return this.gone.size;
  }

  /** Records the first instant this process knew `id` gone (kept if known before); returns it. */
  private knowGone(id: string, at: number): number {
    const known = this.gone.get(id);
    if (known !== undefined) return known;
    if (this.gone.size >= GONE_SESSIONS_KEPT) {
      // Forgetting only makes a later wait start anew: longer, never shorter.
      const oldest = this.gone.keys().next();
      if (oldest.done !== true) this.gone.delete(oldest.value);
    }
    this.gone.set(id, at);
    return at;
  }

  /** Ends crashed gateways' sessions in the background, every `everyMs`. */
  startSweeping(everyMs: number): void {
    const sweep = () => {
      this.judge(null)
        .catch(() => undefined) // the store is down: the next sweep tries again
        .finally(() => {
          if (this.sweepTimer !== null) {
            this.sweepTimer = setTimeout(sweep, everyMs);
            this.sweepTimer.unref();
          }
        });
    };
    this.sweepTimer = setTimeout(sweep, everyMs);
    this.sweepTimer.unref();
  }

  stop(): void {
    if (this.sweepTimer !== null) clearTimeout(this.sweepTimer);
    this.sweepTimer = null;
  }
}
