/** The request-path circuit breaker (src/gateway/breaker.ts): opossum's semantics for the options used. */
import { describe, expect, it } from 'vitest';
import { Breaker } from '../../src/gateway/breaker.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ok = () => Promise.resolve('ok');
const boom = () => Promise.reject(Object.assign(new Error('boom'), { code: 'ECONNREFUSED' }));
const code = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: { code?: string }) => e.code ?? 'error',
  );

function breaker(extra: Partial<ConstructorParameters<typeof Breaker>[0]> = {}) {
  const events: string[] = [];
  const b = new Breaker({
    timeoutMs: false,
    errorThresholdPercentage: 50,
    volumeThreshold: 4,
    resetTimeoutMs: 100,
    rollingWindowMs: 10_000,
    onOpen: () => events.push('open'),
    onClose: () => events.push('close'),
    ...extra,
  });
  return { b, events };
}

describe('Breaker', () => {
  it('opens only after volumeThreshold fires with more than the threshold failing', async () => {
    const { b, events } = breaker();
    await b.fire(ok);
    expect(await code(b.fire(boom))).toBe('ECONNREFUSED');
    expect(await code(b.fire(boom))).toBe('ECONNREFUSED'); // 3 fires: below the volume
    expect(events).toEqual([]);
    expect(await code(b.fire(boom))).toBe('ECONNREFUSED'); // 4 fires, 75 % failed
    expect(events).toEqual(['open']);
    let called = false;
    expect(await code(b.fire(() => ((called = true), ok())))).toBe('EOPENBREAKER');
    expect(called).toBe(false);
  });

  it('lets one trial through after the reset timeout: success closes, failure reopens', async () => {
    const { b, events } = breaker({ volumeThreshold: 1 });
    await code(b.fire(boom));
    expect(events).toEqual(['open']);
    await sleep(120);
    let release: (v: string) => void = () => undefined;
    const trial = b.fire(() => new Promise<string>((r) => (release = r)));
    expect(await code(b.fire(ok))).toBe('EOPENBREAKER'); // only one trial at a time
    release('ok');
    expect(await trial).toBe('ok');
    expect(events).toEqual(['open', 'close']);
    expect(await b.fire(ok)).toBe('ok');
    // The window still holds the earlier calls: it takes a failure rate above 50 % again.
    for (let i = 0; i < 5 && events.length < 3; i++) await code(b.fire(boom));
    expect(events).toEqual(['open', 'close', 'open']);
    await sleep(120);
    expect(await code(b.fire(boom))).toBe('ECONNREFUSED'); // the trial failed
    expect(events).toEqual(['open', 'close', 'open', 'open']);
    expect(await code(b.fire(ok))).toBe('EOPENBREAKER');
  });

  it('errors excused by ignore are passed on but never open the circuit', async () => {
    const { b, events } = breaker({ volumeThreshold: 1 });
    for (let i = 0; i < 5; i++) expect(await code(b.fire(boom, () => true))).toBe('ECONNREFUSED');
    expect(events).toEqual([]);
  });

  it('a call slower than timeoutMs fails with ETIMEDOUT and counts as a failure', async () => {
    const { b, events } = breaker({ timeoutMs: 20, volumeThreshold: 1 });
    expect(await code(b.fire(() => sleep(200).then(() => 'late')))).toBe('ETIMEDOUT');
    expect(events).toEqual(['open']);
  });

  it('refuses every call after shutdown', async () => {
    const { b } = breaker();
    b.shutdown();
    expect(await code(b.fire(ok))).toBe('ESHUTDOWN');
  });
});
