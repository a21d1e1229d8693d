/**
 * AdmissionHolds (src/gateway/admission-hold.ts): who may join a hold, and that its store
 * entry is finished exactly once, only when it is closed and its last write is over.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { AdmissionHolds, type Hold } from '../../src/gateway/admission-hold.js';
import { SessionLease } from '../../src/gateway/session.js';

/** The delivery bound every hold here carries (ms). */
const BOUND = 1000;

function lease(id = 's1'): SessionLease {
  const l = new SessionLease(id);
  l.validUntil = Infinity;
  return l;
}

describe('admission holds', () => {
  let finished: string[];
  let holds: AdmissionHolds;
  let s1: SessionLease;

  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'performance'] });
    finished = [];
    holds = new AdmissionHolds(25);
    s1 = lease();
  });
  afterEach(() => {
    vi.restoreAllMocks();
    vi.useRealTimers();
  });

  const admit = (lock: string, token: bigint, l = s1, id = `${lock}@${token}`): Hold =>
    holds.admitted(lock, token, l, token, () => finished.push(id), BOUND);

  it('lets the same token join an open hold, and finishes the entry once, after it closes and its last write', () => {
    const first = admit('a', 5n);
    expect(holds.join('a', 5n, s1, BOUND)).toBeNull(); // not open before its write cleared the barrier
    holds.open(first);
    const second = holds.join('a', 5n, s1, BOUND);
    expect(second).toBe(first);
    expect(second?.highest).toBe(5n);
    holds.leave(first);
    holds.leave(first);
    expect(finished).toEqual([]); // still open: the next write may join
    const third = holds.join('a', 5n, s1, BOUND)!;
    vi.advanceTimersByTime(25);
    expect(holds.join('a', 5n, s1, BOUND)).toBeNull(); // closed at holdMs
    expect(finished).toEqual([]); // third is still at the upstream
    holds.leave(third);
    expect(finished).toEqual(['a@5']);
    expect(holds.size).toBe(0);
  });

  it('finishes an idle hold when its time is up', () => {
    const h = admit('a', 5n);
    holds.open(h);
    holds.leave(h);
    vi.advanceTimersByTime(24);
    expect(finished).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(finished).toEqual(['a@5']);
  });

  it('nothing joins once holdMs passed, even before the closing timer ran', () => {
    const h = admit('a', 5n);
    holds.open(h);
    // The clock is past holdMs but the timer that closes the hold has not run (a busy loop).
    const at = performance.now();
    vi.spyOn(performance, 'now').mockReturnValue(at + 25);
    expect(holds.join('a', 5n, s1, BOUND)).toBeNull();
    holds.leave(h);
    expect(finished).toEqual(['a@5']);
  });

  it('another token closes the hold: its entry is finished as soon as its writes are over', () => {
    const h = admit('a', 5n);
    holds.open(h);
    expect(holds.join('a', 6n, s1, BOUND)).toBeNull();
    expect(finished).toEqual([]); // h's own write is still in flight
    expect(holds.join('a', 5n, s1, BOUND)).toBeNull(); // closed for good
    holds.leave(h);
    expect(finished).toEqual(['a@5']);
  });

  it('an idle hold is finished at once when another token comes', () => {
    const h = admit('a', 5n);
    holds.open(h);
    holds.leave(h);
    expect(holds.join('a', 6n, s1, BOUND)).toBeNull();
    expect(finished).toEqual(['a@5']);
    vi.advanceTimersByTime(100);
    expect(finished).toEqual(['a@5']); // exactly once
  });

  it('a newer admission of another token supersedes the open hold', () => {
    const old = admit('a', 5n);
    holds.open(old);
    holds.leave(old);
    const newer = admit('a', 6n);
    holds.open(newer);
    expect(finished).toEqual(['a@5']);
    expect(holds.join('a', 6n, s1, BOUND)).toBe(newer);
  });

  it('a second admission of the same token keeps the first hold and finishes its own entry when done', () => {
    const first = admit('a', 5n, s1, 'r1');
    const second = admit('a', 5n, s1, 'r2');
    holds.open(first);
    holds.open(second);
    expect(holds.join('a', 5n, s1, BOUND)).toBe(first);
    holds.leave(second);
    expect(finished).toEqual(['r2']);
  });

  it('nothing joins under a lapsed or another session, and the hold is closed', () => {
    const h = admit('a', 5n);
    holds.open(h);
    expect(holds.join('a', 5n, lease('s2'), BOUND)).toBeNull();
    holds.leave(h);
    expect(finished).toEqual(['a@5']);

    const k = admit('b', 7n);
    holds.open(k);
    s1.validUntil = -Infinity;
    expect(holds.join('b', 7n, s1, BOUND)).toBeNull();
    holds.leave(k);
    expect(finished).toEqual(['a@5', 'b@7']);
  });

  it('does not open under a lapsed lease, nor when holds are off', () => {
    const off = new AdmissionHolds(0);
    const h = off.admitted('a', 5n, s1, 5n, () => finished.push('off'), BOUND);
    off.open(h);
    expect(off.join('a', 5n, s1, BOUND)).toBeNull();
    off.leave(h);
    expect(finished).toEqual(['off']);

    const lapsed = lease('s3');
    lapsed.validUntil = -Infinity;
    const k = admit('b', 7n, lapsed);
    holds.open(k);
    expect(holds.size).toBe(0);
    holds.leave(k);
    expect(finished).toEqual(['off', 'b@7']);
  });

  it('holds of different locks are independent', () => {
    const a = admit('a', 5n);
    const b = admit('b', 5n);
    holds.open(a);
    holds.open(b);
    expect(holds.join('a', 5n, s1, BOUND)).toBe(a);
    expect(holds.join('b', 5n, s1, BOUND)).toBe(b);
    expect(holds.size).toBe(2);
  });

  it('rejects a negative or fractional holdMs', () => {
    expect(() => new AdmissionHolds(-1)).toThrow(RangeError);
    expect(() => new AdmissionHolds(1.5)).toThrow(RangeError);
  });

  describe('renewal', () => {
    type Next = { highest: bigint; finish: () => void } | null;
    let asked: { lock: string; resolve: (n: Next) => void }[];

    beforeEach(() => {
      asked = [];
      holds = new AdmissionHolds(20, (lock) => new Promise<Next>((resolve) => asked.push({ lock, resolve })));
    });
    const fresh = (id: string): Next => ({ highest: 5n, finish: () => finished.push(id) });
    const settle = () => vi.advanceTimersByTimeAsync(0);
    /** Renewals asked for are made at the next tick: holdMs / 8 (2 ms here). */
    const TICK = 2;
    /** An open hold that a write joined (and left) in its second half: its renewal was made. */
    const renewing = (lock: string, token: bigint): Hold => {
      const h = admit(lock, token);
      holds.open(h);
      vi.advanceTimersByTime(10);
      holds.leave(holds.join(lock, token, s1, BOUND)!);
      vi.advanceTimersByTime(TICK);
      return h;
    };

    it('a write in the second half renews once; the fresh admission replaces the hold', async () => {
      const h = admit('a', 5n);
      holds.open(h);
      holds.leave(holds.join('a', 5n, s1, BOUND)!); // first half: no renewal
      expect(asked).toHaveLength(0);
      vi.advanceTimersByTime(10);
      const late = holds.join('a', 5n, s1, BOUND)!;
      holds.join('a', 5n, s1, BOUND);
      expect(asked).toHaveLength(0); // made at the next tick
      vi.advanceTimersByTime(TICK);
      expect(asked).toHaveLength(1); // one renewal at a time
      asked[0]!.resolve(fresh('renewed'));
      await settle();
      const next = holds.join('a', 5n, s1, BOUND);
      expect(next).not.toBe(h);
      holds.leave(next!);
      holds.leave(late);
      holds.leave(late);
      holds.leave(h);
      expect(finished).toEqual(['a@5']); // the old entry, once its writes were over
      vi.advanceTimersByTime(19);
      expect(holds.join('a', 5n, s1, BOUND)).toBe(next); // the fresh hold runs its own 20 ms
      holds.leave(next!);
      vi.advanceTimersByTime(TICK); // that join, in its second half, asked for a renewal
      expect(asked).toHaveLength(2);
      expect(finished).toEqual(['a@5']); // its time is over, but its renewal is unanswered
      asked[1]!.resolve(null); // refused: the hold ends, its time being over
      await settle();
      expect(finished).toEqual(['a@5', 'renewed']);
      expect(holds.size).toBe(0);
    });

    it('while its renewal is unanswered a hold is joined up to another holdMs past its time, no longer', async () => {
      const h = renewing('a', 5n); // at 12 ms of 20, its renewal made
      holds.leave(h);
      vi.advanceTimersByTime(10); // 22 ms: past its time, the store has not answered
      const slow = holds.join('a', 5n, s1, BOUND);
      expect(slow).toBe(h); // joined: the store's slow answer costs the holder's writes nothing
      holds.leave(slow!);
      vi.advanceTimersByTime(17); // 39 ms
      expect(holds.join('a', 5n, s1, BOUND)).toBe(h);
      holds.leave(h);
      expect(finished).toEqual([]);
      vi.advanceTimersByTime(1); // 40 ms: 2 × holdMs, nothing joins any more
      expect(finished).toEqual(['a@5']);
      expect(holds.join('a', 5n, s1, BOUND)).toBeNull();
      asked[0]!.resolve(fresh('late'));
      await settle();
      expect(finished).toEqual(['a@5', 'late']); // the late fresh entry is finished, not installed
      expect(holds.size).toBe(0);
    });

    it("the renewal answered past the hold's time replaces it; refused or failed, the hold closes then", async () => {
      const h = renewing('a', 5n);
      vi.advanceTimersByTime(10);
      asked[0]!.resolve(fresh('r1'));
      await settle();
      const next = holds.join('a', 5n, s1, BOUND);
      expect(next).not.toBe(h);
      expect(next).not.toBeNull();
      holds.leave(next!);
      holds.leave(h);
      expect(finished).toEqual(['a@5']);

      const failing = new AdmissionHolds(20, () => Promise.reject(new Error('store down')));
      const b = failing.admitted('b', 7n, s1, 7n, () => finished.push('b@7'), BOUND);
      failing.open(b);
      vi.advanceTimersByTime(10);
      failing.leave(failing.join('b', 7n, s1, BOUND)!);
      vi.advanceTimersByTime(TICK);
      failing.leave(b);
      vi.advanceTimersByTime(8); // its renewal failed: it closed at its time (and r1 ran out)
      await settle();
      expect(finished).toEqual(['a@5', 'r1', 'b@7']);
      expect(failing.join('b', 7n, s1, BOUND)).toBeNull();
    });

    it('renewals falling due within a tick are made together; a hold closed before its tick is not renewed', () => {
      const a = admit('a', 5n);
      const b = admit('b', 6n);
      const c = admit('c', 7n);
      holds.open(a);
      holds.open(b);
      holds.open(c);
      vi.advanceTimersByTime(10);
      holds.leave(holds.join('a', 5n, s1, BOUND)!);
      vi.advanceTimersByTime(1);
      holds.leave(holds.join('b', 6n, s1, BOUND)!);
      holds.leave(holds.join('c', 7n, s1, BOUND)!);
      expect(holds.join('c', 8n, s1, BOUND)).toBeNull(); // another token closes c's hold
      expect(asked).toHaveLength(0);
      vi.advanceTimersByTime(1);
      expect(asked.map((x) => x.lock)).toEqual(['a', 'b']);
    });

    it('a renewal the store refuses changes nothing: the hold ends at its time', async () => {
      const h = renewing('a', 5n);
      asked[0]!.resolve(null);
      await settle();
      holds.leave(h);
      vi.advanceTimersByTime(10);
      expect(finished).toEqual(['a@5']);
      expect(holds.size).toBe(0);
    });

    it('a renewal that comes back after another token superseded the hold is finished at once', async () => {
      const h = renewing('a', 5n);
      expect(holds.join('a', 6n, s1, BOUND)).toBeNull(); // supersedes
      asked[0]!.resolve(fresh('late'));
      await settle();
      expect(finished).toEqual(['late']);
      expect(holds.join('a', 5n, s1, BOUND)).toBeNull();
      holds.leave(h);
      expect(finished).toEqual(['late', 'a@5']);
    });

    it('a renewal that comes back after the hold ran out is finished; the next write asks the store', async () => {
      const h = renewing('a', 5n);
      holds.leave(h);
      vi.advanceTimersByTime(30); // 2 × holdMs
      expect(finished).toEqual(['a@5']);
      asked[0]!.resolve(fresh('r1'));
      await settle();
      expect(finished).toEqual(['a@5', 'r1']);
      expect(holds.join('a', 5n, s1, BOUND)).toBeNull();

      renewing('b', 7n);
      vi.advanceTimersByTime(30); // it runs out; a write opens another hold for b
      const other = admit('b', 7n, s1, 'b-other');
      holds.open(other);
      asked[1]!.resolve(fresh('r2'));
      await settle();
      expect(finished).toContain('r2');
      expect(holds.join('b', 7n, s1, BOUND)).toBe(other);
    });
  });
});
