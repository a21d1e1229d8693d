/** The event log's ring: every field of an event comes back as it went in, in order, ids included. */
import { describe, expect, it } from 'vitest';
import { EventRing, type Extra } from '../../src/observe/event-ring.js';
import type { EventInput } from '../../src/observe/events.js';

const input = (n: number, worker?: number): EventInput => ({
  time: `2026-12-02T10:00:00.${String(n).padStart(3, '0')}Z`,
  type: n % 2 === 0 ? 'fenced-write' : 'lease-expired',
  reason: n % 2 === 0 ? 'stale' : 'expired',
  route: n % 2 === 0 ? `route-${n}` : null,
  lock: `lock:${n}`,
  token: n % 3 === 0 ? null : String(100 + n),
  highest: String(200 + n),
  enforced: n % 4 !== 0,
  client: `10.0.0.${n}`,
  owner: null,
  method: n % 2 === 0 ? 'PUT' : null,
  path: n % 2 === 0 ? `/orders/${n}` : null,
  ...(worker === undefined ? {} : { worker }),
});

const own = (owner: string | null): Extra => ({ owner, attribution: null, leaseEndedAt: null });

describe('EventRing', () => {
  it('gives back every field, the owner and the id of each event kept, the oldest going first when full', () => {
    const ring = new EventRing(3);
    for (let n = 1; n <= 5; n++)
      ring.push(n, input(n, n === 5 ? 2 : undefined), own(n === 4 ? 'worker-a' : null));
    expect(ring.size).toBe(3);
    expect([0, 1, 2].map((i) => ring.idAt(i))).toEqual([3, 4, 5]);
    expect(ring.at(0)).toEqual({ id: 3, ...input(3), owner: null });
    expect(ring.at(1)).toEqual({ id: 4, ...input(4), owner: 'worker-a' });
    expect(ring.at(2)).toEqual({ id: 5, ...input(5, 2), owner: null });
    expect('worker' in ring.at(0)).toBe(false);
  });

  it('gives back each field as it went in when events of one lock differ in one field only', () => {
    // Events of a lock that repeat its last one but for the time share what they hold:
    // each field that differs must still come back as it went in.
    const base = { ...input(2), lock: 'lock:same' };
    const changes: Partial<EventInput>[] = [
      { time: '2026-12-02T10:00:01.000Z' },
      { type: 'drain-timeout' },
      { token: '999' },
      { highest: '1000' },
      { path: '/orders/other' },
      { client: '10.9.9.9' },
      { enforced: !base.enforced },
      { reason: 'forged' },
      { method: 'POST' },
      { route: 'other-route' },
      { worker: 3 },
    ];
    // Each change right after the event it changes, and the owner alone changed once.
    const events: [EventInput, string | null][] = [[base, null]];
    for (const change of changes) events.push([{ ...base, ...change }, null], [base, null]);
    events.push([base, 'someone'], [base, null]);
    const ring = new EventRing(events.length);
    events.forEach(([e, owner], n) => ring.push(n + 1, e, own(owner)));
    events.forEach(([e, owner], n) => expect(ring.at(n)).toEqual({ id: n + 1, ...e, owner }));
  });

  it('keeps events in order before it is full', () => {
    const ring = new EventRing(10);
    ring.push(1, input(1), own(null));
    ring.push(2, input(2), own(null));
    expect([ring.size, ring.idAt(0), ring.at(1).lock]).toEqual([2, 1, 'lock:2']);
  });
});
