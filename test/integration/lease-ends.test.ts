/**
 * When a refused token's lease ended (the event's `leaseEndedAt`): the issuer notes each
 * lease's end as it sees it — released at the release, lapsed and taken over at its
 * expiry, past its expiry but not yet swept at its expiry — and knows nothing of a live one.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Issuer } from '../../src/issuer/service.js';
import { LeaseEnds } from '../../src/observe/lease-ends.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { sleep } from '../helpers/e2e.js';

let issuer: Issuer | null = null;
afterEach(() => issuer?.shutdown());

const LIMITS = { minTtlMs: 50, maxTtlMs: 60_000, maxWaitMs: 10_000 };

async function grant(key: string, owner: string, ttlMs: number) {
  const r = await issuer!.acquire({ key, owner, ttlMs, waitMs: 0 });
  if (!r.ok) throw new Error(`not granted: ${r.reason}`);
  return r.lease;
}

describe('LeaseEnds, fed by the issuer', () => {
  it('notes a released lease at its release, a lapsed one at its expiry, and none for a live lease', async () => {
    const ends = new LeaseEnds();
    issuer = new Issuer(new MemoryStore(), createMetrics({ defaultMetrics: false }), LIMITS, ends);

    const kept = await grant('e:1', 'a', 10_000);
    expect(ends.endedAt('e:1', kept.token.toString())).toBeNull();
    const before = Date.now();
    await issuer.release('e:1', kept.leaseId);
    const released = ends.endedAt('e:1', kept.token.toString());
    expect(released).not.toBeNull();
    expect(released!).toBeGreaterThanOrEqual(before);
    expect(released!).toBeLessThanOrEqual(Date.now());

    const lapsed = await grant('e:2', 'a', 100);
    const granted = Date.now();
    await sleep(160);
    // Past its expiry, before any sweep or takeover: known from the live grant.
    const seen = ends.endedAt('e:2', lapsed.token.toString());
    expect(seen).not.toBeNull();
    expect(seen!).toBeLessThanOrEqual(granted + 100);
    await grant('e:2', 'b', 10_000);
    // Taken over: ended at its expiry, not at the takeover.
    expect(ends.endedAt('e:2', lapsed.token.toString())).toBe(seen);
    expect(ends.endedAt('e:2', '999')).toBeNull();
  });

  it('keeps at most 16 ends a key and forgets the least recent keys past its bound', () => {
    const ends = new LeaseEnds(16, 2);
    for (let t = 1; t <= 20; t++) ends.note('k', String(t), t);
    expect(ends.endedAt('k', '20')).toBe(20);
    expect(ends.endedIso('k', '20')).toBe(new Date(20).toISOString());
    expect(ends.endedAt('k', '5')).toBe(5);
    expect(ends.endedAt('k', '4')).toBeNull();
    ends.note('j', '1', 1);
    ends.note('i', '1', 1);
    expect(ends.endedAt('k', '20')).toBeNull();
    expect(ends.endedAt('i', '1')).toBe(1);
  });
});
