/**
 * The request-path circuit breaker (src/breakers/circuit.ts): opossum's semantics for the
 * options used. Time is faked (setTimeout, Date and performance.now), so every timing
 * below is exact and nothing waits for the wall clock.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Breaker } from '../../src/breakers/circuit.js';

const ok = () => Promise.resolve('ok');
const boom = () => Promise.reject(Object.assign(new Error('boom'), { code: 'ECONNREFUSED' }));
const code = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: { code?: string }) => e.code ?? 'error',
  );

/** A call that stays pending until settled from outside. */
function deferred<T = string>() {
  let resolve: (v: T) => void = () => undefined;
  let reject: (e: unknown) => void = () => undefined;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject, action: () => promise };
}

/**
 * Watches a call from the moment it is made (so a rejection is never unhandled):
 * `now()` is what it has done so far, once the microtasks queued by then have run.
 */
function watch(p: Promise<unknown>) {
  let seen = 'pending';
  p.then(
    () => (seen = 'resolved'),
    (e: { code?: string }) => (seen = e.code ?? 'error'),
  );
  return {
    promise: p,
    now: async () => {
      await vi.advanceTimersByTimeAsync(0);
      return seen;
    },
  };
}

function breaker(extra: Partial<ConstructorParameters<typeof Breaker>[0]> = {}) {
  const events: string[] = [];
  const states: string[] = [];
  const b = new Breaker({
    timeoutMs: false,
    errorThresholdPercentage: 50,
    volumeThreshold: 4,
    resetTimeoutMs: 5000,
    rollingWindowMs: 10_000,
    onOpen: () => events.push('open'),
    onClose: () => events.push('close'),
    onState: (s) => states.push(s),
    ...extra,
  });
  return { b, events, states };
}

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  vi.useRealTimers();
});

describe('Breaker: opening', () => {
  it('opens only after volumeThreshold fires with more than the threshold failing', async () => {
    const { b, events } = breaker();
    await b.fire(ok);
    expect(await code(b.fire(boom))).toBe('ECONNREFUSED');
    expect(await code(b.fire(boom))).toBe('ECONNREFUSED'); // 3 fires: below the volume
    expect(events).toEqual([]);
    expect(b.state).toBe('closed');
    expect(await code(b.fire(boom))).toBe('ECONNREFUSED'); // 4 fires, 75 % failed
    expect(events).toEqual(['open']);
    expect(b.state).toBe('open');
    expect(b.opened).toBe(true);
    let called = false;
    expect(await code(b.fire(() => ((called = true), ok())))).toBe('EOPENBREAKER');
    expect(called).toBe(false);
  });

  it('needs strictly more than errorThresholdPercentage to open', async () => {
    const { b, events } = breaker();
    await b.fire(ok);
    await b.fire(ok);
    await code(b.fire(boom));
    await code(b.fire(boom)); // 4 fires, exactly 50 %
    expect(events).toEqual([]);
    await code(b.fire(boom)); // 5 fires, 60 %
    expect(events).toEqual(['open']);
  });

  it('a refused call is an Error with code EOPENBREAKER', async () => {
    const { b } = breaker({ volumeThreshold: 1 });
    await code(b.fire(boom));
    const err = (await b.fire(ok).catch((e: unknown) => e)) as Error & { code?: string };
    expect(err).toBeInstanceOf(Error);
    expect(err.code).toBe('EOPENBREAKER');
    expect(err.message).toBe('Breaker is open');
  });

  it('an action that throws instead of rejecting is a failure, and its error is passed on', async () => {
    const { b, events } = breaker({ volumeThreshold: 1 });
    const thrown = Object.assign(new Error('sync'), { code: 'ESYNC' });
    expect(
      await code(
        b.fire(() => {
          throw thrown;
        }),
      ),
    ).toBe('ESYNC');
    expect(events).toEqual(['open']);
  });

  it('counts fires and failures over the rolling window only', async () => {
    const { b, events } = breaker();
    for (let i = 0; i < 3; i++) await code(b.fire(boom)); // t = 0: 3 fires, 3 failures
    await vi.advanceTimersByTimeAsync(10_000); // the window (10 buckets of 1 s) has moved past them
    await code(b.fire(boom)); // 1 fire in the window: below the volume
    expect(events).toEqual([]);
  });

  it('keeps a bucket until the whole window has passed it', async () => {
    const { b, events } = breaker();
    for (let i = 0; i < 3; i++) await code(b.fire(boom)); // t = 0
    await vi.advanceTimersByTimeAsync(9_999); // still in the last of the 10 buckets
    await code(b.fire(boom)); // 4 fires, all failed
    expect(events).toEqual(['open']);
  });

  it('calls refused while open count as fires in the window', async () => {
    const { b, events } = breaker({ volumeThreshold: 1 });
    await code(b.fire(boom)); // 1 of 1 failed: opens
    for (let i = 0; i < 3; i++) expect(await code(b.fire(ok))).toBe('EOPENBREAKER');
    await vi.advanceTimersByTimeAsync(5000);
    expect(await b.fire(ok)).toBe('ok'); // the trial closes it
    expect(events).toEqual(['open', 'close']);
    // 6 fires (3 of them refused), 2 failures: 33 %, stays closed. Without the refused
    // calls it would be 2 of 3.
    await code(b.fire(boom));
    expect(events).toEqual(['open', 'close']);
  });
});

describe('Breaker: half-open', () => {
  it('turns half-open after resetTimeoutMs by itself, then lets one trial through', async () => {
    const { b, events, states } = breaker({ volumeThreshold: 1 });
    expect(states).toEqual(['closed']);
    await code(b.fire(boom));
    expect(states).toEqual(['closed', 'open']);
    await vi.advanceTimersByTimeAsync(4999);
    expect(b.state).toBe('open');
    expect(await code(b.fire(ok))).toBe('EOPENBREAKER');
    await vi.advanceTimersByTimeAsync(1);
    expect(b.state).toBe('half_open');
    expect(b.opened).toBe(true);
    expect(states).toEqual(['closed', 'open', 'half_open']);
    const trial = deferred();
    const fired = b.fire(trial.action);
    expect(await code(b.fire(ok))).toBe('EOPENBREAKER'); // only one trial at a time
    trial.resolve('ok');
    expect(await fired).toBe('ok');
    expect(events).toEqual(['open', 'close']);
    expect(states).toEqual(['closed', 'open', 'half_open', 'closed']);
    expect(b.state).toBe('closed');
    expect(b.opened).toBe(false);
    expect(await b.fire(ok)).toBe('ok');
  });

  it('a failed trial opens the circuit again for another resetTimeoutMs', async () => {
    const { b, events, states } = breaker({ volumeThreshold: 1 });
    await code(b.fire(boom));
    await vi.advanceTimersByTimeAsync(5000);
    expect(await code(b.fire(boom))).toBe('ECONNREFUSED'); // the trial failed
    expect(events).toEqual(['open', 'open']);
    expect(states).toEqual(['closed', 'open', 'half_open', 'open']);
    expect(await code(b.fire(ok))).toBe('EOPENBREAKER');
    await vi.advanceTimersByTimeAsync(4999);
    expect(b.state).toBe('open');
    await vi.advanceTimersByTimeAsync(1);
    expect(b.state).toBe('half_open');
    expect(await b.fire(ok)).toBe('ok');
    expect(states).toEqual(['closed', 'open', 'half_open', 'open', 'half_open', 'closed']);
  });

  it('a trial whose error is excused counts as a success and closes the circuit', async () => {
    const { b, events } = breaker({ volumeThreshold: 1 });
    await code(b.fire(boom));
    await vi.advanceTimersByTimeAsync(5000);
    expect(await code(b.fire(boom, () => true))).toBe('ECONNREFUSED');
    expect(events).toEqual(['open', 'close']);
  });

  it('while half-open, the answer of a call made before the circuit opened decides too', async () => {
    const { b, events } = breaker({ volumeThreshold: 1 });
    const early = deferred();
    const earlyFired = b.fire(early.action);
    await code(b.fire(boom)); // 1 of 2 failed: 50 %
    await code(b.fire(boom)); // 2 of 3: opens, with `early` still out
    await vi.advanceTimersByTimeAsync(5000);
    expect(b.state).toBe('half_open');
    early.resolve('ok');
    expect(await earlyFired).toBe('ok');
    expect(events).toEqual(['open', 'close']);
  });

  it('after the circuit closes, it takes the window failing above the threshold again', async () => {
    const { b, events } = breaker({ volumeThreshold: 1 });
    await code(b.fire(boom));
    await vi.advanceTimersByTimeAsync(5000);
    await b.fire(ok);
    expect(await b.fire(ok)).toBe('ok');
    // The window holds boom, ok, ok (and no refusals): 1 of 3 failed.
    await code(b.fire(boom)); // 2 of 4: not above 50 %
    expect(events).toEqual(['open', 'close']);
    await code(b.fire(boom)); // 3 of 5
    expect(events).toEqual(['open', 'close', 'open']);
  });
});

describe('Breaker: errors excused by ignore', () => {
  it('are passed on but never open the circuit', async () => {
    const { b, events } = breaker({ volumeThreshold: 1 });
    for (let i = 0; i < 5; i++) expect(await code(b.fire(boom, () => true))).toBe('ECONNREFUSED');
    expect(events).toEqual([]);
  });

  it('ignore sees each error and decides per call', async () => {
    const { b, events } = breaker({ volumeThreshold: 2 });
    const seen: unknown[] = [];
    const excuse = (err: unknown) => (seen.push((err as { code?: string }).code), true);
    await code(b.fire(boom, excuse));
    expect(seen).toEqual(['ECONNREFUSED']);
    await code(b.fire(boom)); // 2 fires, 1 failure: 50 %
    expect(events).toEqual([]);
    await code(b.fire(boom, () => false)); // 3 fires, 2 failures
    expect(events).toEqual(['open']);
  });

  it('ignore is not asked about successes', async () => {
    const { b } = breaker();
    let asked = false;
    await b.fire(ok, () => (asked = true));
    expect(asked).toBe(false);
  });
});

describe('Breaker: timeouts', () => {
  it('a call slower than timeoutMs fails with ETIMEDOUT then, and counts as a failure', async () => {
    const { b, events } = breaker({ timeoutMs: 20, volumeThreshold: 1 });
    const slow = deferred();
    const fired = watch(b.fire(slow.action));
    await vi.advanceTimersByTimeAsync(19);
    expect(await fired.now()).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(await fired.now()).toBe('ETIMEDOUT');
    const err = (await fired.promise.catch((e: unknown) => e)) as Error & { code?: string };
    expect(err).toBeInstanceOf(Error);
    expect(err.message).toBe('Timed out after 20ms');
    expect(events).toEqual(['open']);
    slow.resolve('late'); // a late answer changes nothing
    await vi.advanceTimersByTimeAsync(0);
    expect(b.state).toBe('open');
  });

  it('each pending call times out at its own deadline', async () => {
    const { b } = breaker({ timeoutMs: 100, volumeThreshold: 100 });
    const first = watch(b.fire(deferred().action)); // t = 0
    await vi.advanceTimersByTimeAsync(30);
    const answered = deferred();
    const second = watch(b.fire(answered.action)); // t = 30, answered at t = 60
    await vi.advanceTimersByTimeAsync(10);
    const third = watch(b.fire(deferred().action)); // t = 40
    await vi.advanceTimersByTimeAsync(20);
    answered.resolve('ok');
    expect(await second.promise).toBe('ok');
    await vi.advanceTimersByTimeAsync(39); // t = 99
    expect(await first.now()).toBe('pending');
    await vi.advanceTimersByTimeAsync(1); // t = 100
    expect(await first.now()).toBe('ETIMEDOUT');
    expect(await third.now()).toBe('pending');
    await vi.advanceTimersByTimeAsync(39); // t = 139
    expect(await third.now()).toBe('pending');
    await vi.advanceTimersByTimeAsync(1); // t = 140
    expect(await third.now()).toBe('ETIMEDOUT');
    // A call made after the others had all ended gets its full timeout too.
    await vi.advanceTimersByTimeAsync(500);
    const fourth = watch(b.fire(deferred().action));
    await vi.advanceTimersByTimeAsync(99);
    expect(await fourth.now()).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(await fourth.now()).toBe('ETIMEDOUT');
  });

  it('a call that fails after its timeout is not counted twice', async () => {
    const { b, events } = breaker({ timeoutMs: 20, volumeThreshold: 2 });
    await b.fire(ok);
    const slow = deferred();
    const fired = watch(b.fire(slow.action));
    await vi.advanceTimersByTimeAsync(20);
    expect(await fired.now()).toBe('ETIMEDOUT'); // 2 fires, 1 failure: 50 %
    slow.reject(Object.assign(new Error('late'), { code: 'ECONNRESET' }));
    await vi.advanceTimersByTimeAsync(0);
    expect(events).toEqual([]);
  });

  it('a timed-out trial opens the circuit again', async () => {
    const { b, states } = breaker({ timeoutMs: 20, volumeThreshold: 1 });
    await code(b.fire(boom));
    await vi.advanceTimersByTimeAsync(5000);
    const fired = watch(b.fire(deferred().action));
    await vi.advanceTimersByTimeAsync(20);
    expect(await fired.now()).toBe('ETIMEDOUT');
    expect(states).toEqual(['closed', 'open', 'half_open', 'open']);
  });

  it('ignore is asked about timeouts too', async () => {
    const { b, events } = breaker({ timeoutMs: 20, volumeThreshold: 1 });
    const seen: unknown[] = [];
    const fired = watch(
      b.fire(deferred().action, (err) => (seen.push((err as { code?: string }).code), true)),
    );
    await vi.advanceTimersByTimeAsync(20);
    expect(await fired.now()).toBe('ETIMEDOUT');
    expect(seen).toEqual(['ETIMEDOUT']);
    expect(events).toEqual([]);
  });

  it('timeoutMs false: a call may take as long as it takes', async () => {
    const { b } = breaker({ timeoutMs: false });
    const slow = deferred();
    const fired = watch(b.fire(slow.action));
    await vi.advanceTimersByTimeAsync(3_600_000);
    expect(await fired.now()).toBe('pending');
    slow.resolve('ok');
    expect(await fired.promise).toBe('ok');
  });
});

describe('Breaker: retryAfterSeconds', () => {
  it('is the whole seconds until the trial while open, else 1', async () => {
    const { b } = breaker({ volumeThreshold: 1 });
    expect(b.retryAfterSeconds()).toBe(1);
    await code(b.fire(boom));
    expect(b.retryAfterSeconds()).toBe(5);
    await vi.advanceTimersByTimeAsync(1000);
    expect(b.retryAfterSeconds()).toBe(4);
    await vi.advanceTimersByTimeAsync(1);
    expect(b.retryAfterSeconds()).toBe(4); // 3.999 s: rounded up
    await vi.advanceTimersByTimeAsync(3998);
    expect(b.retryAfterSeconds()).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(b.state).toBe('half_open');
    expect(b.retryAfterSeconds()).toBe(1);
  });
});

describe('Breaker: shutdown', () => {
  it('refuses every later call with ESHUTDOWN, without calling the action', async () => {
    const { b } = breaker();
    b.shutdown();
    let called = false;
    expect(await code(b.fire(() => ((called = true), ok())))).toBe('ESHUTDOWN');
    expect(called).toBe(false);
  });

  it('stops the reset timer: an open circuit reports no more state changes', async () => {
    const { b, states } = breaker({ volumeThreshold: 1 });
    await code(b.fire(boom));
    b.shutdown();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(states).toEqual(['closed', 'open']);
    expect(await code(b.fire(ok))).toBe('ESHUTDOWN');
  });

  it('calls already out still settle: their answer, or ETIMEDOUT', async () => {
    const { b } = breaker({ timeoutMs: 20 });
    const answered = deferred();
    const first = watch(b.fire(answered.action));
    const second = watch(b.fire(deferred().action));
    b.shutdown();
    answered.resolve('ok');
    expect(await first.promise).toBe('ok');
    await vi.advanceTimersByTimeAsync(20);
    expect(await second.now()).toBe('ETIMEDOUT');
  });
});
