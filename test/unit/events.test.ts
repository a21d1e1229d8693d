import { describe, expect, it } from 'vitest';
import { EventLog, type EventInput, type FenceEvent } from '../../src/observe/events.js';
import { OwnerLookup } from '../../src/observe/owners.js';
import type { GrantRecord } from '../../src/store/types.js';
import { sleep, waitUntil } from '../helpers/wait.js';

function input(over: Partial<EventInput> = {}): EventInput {
  return {
    time: new Date().toISOString(),
    type: 'fenced-write',
    reason: 'stale',
    route: 'order-writes',
    lock: 'order:1',
    token: '41',
    highest: '42',
    enforced: true,
    client: '127.0.0.1',
    owner: null,
    method: 'PUT',
    path: '/orders/1',
    ...over,
  };
}

const until = (cond: () => boolean, what: string, ms = 2000): Promise<void> =>
  waitUntil(what, cond, { timeoutMs: ms, everyMs: 5 });

describe('EventLog', () => {
  it('keeps at most its capacity under 25,000 events, with ids 1, 2, 3… and the newest kept', () => {
    const log = new EventLog({ capacity: 10_000 });
    for (let i = 0; i < 25_000; i++) log.record(input({ lock: `order:${i % 100}` }));
    expect(log.total).toBe(25_000);
    expect(log.retained).toBe(10_000);
    expect(log.oldestId).toBe(15_001);
    const recent = log.recent(10_000);
    expect(recent).toHaveLength(10_000);
    expect(recent[0]?.id).toBe(25_000);
    expect(recent[9_999]?.id).toBe(15_001);
    expect(log.after(24_995).map((e) => e.id)).toEqual([24_996, 24_997, 24_998, 24_999, 25_000]);
    expect(log.after(0)).toHaveLength(10_000); // what fell out of the ring is gone
    expect(log.after(25_000)).toEqual([]);
  });

  it('filters by route, lock, type, reason, id and time', () => {
    const log = new EventLog();
    log.record(input({ route: 'a', lock: 'k1', reason: 'stale', time: '2026-01-01T00:00:00.000Z' }));
    log.record(input({ route: 'b', lock: 'k2', reason: 'forged', time: '2026-01-01T00:00:01.000Z' }));
    log.record(
      input({
        type: 'renew-failed',
        reason: 'lease-lost',
        route: null,
        lock: 'k1',
        token: null,
        time: '2026-01-01T00:00:02.000Z',
      }),
    );
    const ids = (f: Parameters<EventLog['recent']>[1]) => log.recent(100, f).map((e) => e.id);
    expect(ids({})).toEqual([3, 2, 1]);
    expect(ids({ route: 'a' })).toEqual([1]);
    expect(ids({ lock: 'k1' })).toEqual([3, 1]);
    expect(ids({ types: ['renew-failed'] })).toEqual([3]);
    expect(ids({ reasons: ['stale', 'forged'] })).toEqual([2, 1]);
    expect(ids({ afterId: 1 })).toEqual([3, 2]);
    expect(ids({ fromTime: Date.parse('2026-01-01T00:00:01.000Z') })).toEqual([3, 2]);
    expect(log.recent(1)).toHaveLength(1);
  });

  it('records an event once its owner is known, and still records it when the lookup fails', async () => {
    const seen: FenceEvent[] = [];
    let fail = false;
    const log = new EventLog({
      owners: async (lock, token) => {
        await sleep(5);
        if (fail) throw new Error('store down');
        return lock === 'order:1' && token === '41' ? 'alice' : null;
      },
    });
    log.subscribe((e) => seen.push(e));
    log.record(input());
    // Nothing to look up, but recorded after the refusal before it: it waits behind it.
    log.record(input({ token: null, reason: 'missing' }));
    expect(seen).toEqual([]);
    await until(() => seen.length === 2, 'the looked-up event and the one behind it');
    expect(seen[0]).toMatchObject({ id: 1, owner: 'alice', token: '41', reason: 'stale' });
    expect(seen[1]).toMatchObject({ id: 2, owner: null, reason: 'missing' });
    fail = true;
    log.record(input());
    await until(() => seen.length === 3, 'the event whose lookup failed');
    expect(seen[2]).toMatchObject({ id: 3, owner: null });
    // With nothing waiting, an event with nothing to look up is recorded at once.
    log.record(input({ token: null, reason: 'missing' }));
    expect(seen[3]).toMatchObject({ id: 4, reason: 'missing' });
  });

  it('keeps the order of refusals when a later lookup settles first', async () => {
    const delays: Record<string, number> = { '41': 30, '42': 1 };
    const log = new EventLog({
      owners: async (_lock, token) => {
        await sleep(delays[token] ?? 0);
        return `owner-of-${token}`;
      },
    });
    log.record(input({ token: '41' }));
    log.record(input({ token: '42' }));
    await until(() => log.total === 2, 'both events');
    expect(log.after(0).map((e) => [e.id, e.token, e.owner])).toEqual([
      [1, '41', 'owner-of-41'],
      [2, '42', 'owner-of-42'],
    ]);
  });

  it('stops waiting for owners past maxAwaitingOwner: the waiting events are recorded in order, owner null', () => {
    const log = new EventLog({ owners: () => new Promise(() => undefined), maxAwaitingOwner: 3 });
    for (let i = 0; i < 10; i++) log.record(input({ token: String(100 + i) }));
    // The 4th and the 8th pass the bound: each time the 4 waiting are recorded; 2 still wait.
    expect(log.total).toBe(8);
    expect(log.after(0).map((e) => e.token)).toEqual([
      '100',
      '101',
      '102',
      '103',
      '104',
      '105',
      '106',
      '107',
    ]);
    expect(log.recent(10).every((e) => e.owner === null)).toBe(true);
  });

  it('logs at most logPerSecond events a second and summarises the rest', () => {
    const lines: unknown[] = [];
    const log = new EventLog({ logPerSecond: 3, log: (l) => lines.push(l) });
    for (let i = 0; i < 50; i++) log.record(input());
    expect(lines).toHaveLength(3);
    expect(log.total).toBe(50);
  });
});

describe('OwnerLookup', () => {
  class Source {
    reads = 0;
    fail = false;
    delayMs = 5;
    grants = new Map<string, GrantRecord[]>();
    async recentGrants(key: string): Promise<GrantRecord[]> {
      this.reads += 1;
      await sleep(this.delayMs);
      if (this.fail) throw new Error('down');
      return this.grants.get(key) ?? [];
    }
  }

  it('coalesces a flood of lookups for one lock into one read, and caches owners', async () => {
    const src = new Source();
    src.grants.set('order:1', [
      { token: 42n, owner: 'bob' },
      { token: 41n, owner: 'alice' },
    ]);
    const lookup = new OwnerLookup(src);
    const answers = await Promise.all(Array.from({ length: 1000 }, () => lookup.owner('order:1', '41')));
    expect(new Set(answers)).toEqual(new Set(['alice']));
    expect(src.reads).toBe(1);
    expect(await lookup.owner('order:1', '42')).toBe('bob');
    expect(await lookup.owner('order:1', '7')).toBeNull(); // unknown, but read just now
    expect(src.reads).toBe(1);
  });

  it('says how many grants came after a token, and the newest grant, from the record of recent grants', async () => {
    const src = new Source();
    src.grants.set('order:1', [
      { token: 44n, owner: 'dave' },
      { token: 43n, owner: 'carol' },
      { token: 42n, owner: 'bob' },
      { token: 41n, owner: 'alice' },
    ]);
    const lookup = new OwnerLookup(src, { refreshMs: 0 });
    const holder = { owner: 'dave', token: '44' };
    expect(await lookup.attribution('order:1', '41', '44')).toEqual({
      owner: 'alice',
      behind: { grants: 3, exact: true },
      holder,
    });
    expect(await lookup.attribution('order:1', '44', '44')).toMatchObject({
      behind: { grants: 0, exact: true },
    });
    // Older than the record: at least as many grants as it holds. Never issued: nothing to count.
    expect(await lookup.attribution('order:1', '7', '44')).toEqual({
      owner: null,
      behind: { grants: 4, exact: false },
      holder,
    });
    expect(await lookup.attribution('order:1', '99', '44')).toEqual({ owner: null, behind: null, holder });
    // A grant after the record was read (the event's highest is above it): read again.
    src.grants.get('order:1')?.unshift({ token: 45n, owner: 'erin' });
    const reads = src.reads;
    expect(await lookup.attribution('order:1', '41', '45')).toMatchObject({
      behind: { grants: 4, exact: true },
      holder: { owner: 'erin', token: '45' },
    });
    expect(src.reads).toBe(reads + 1);
  });

  it('answers null when the store fails or is slow, and reads again later', async () => {
    const src = new Source();
    src.fail = true;
    const lookup = new OwnerLookup(src, { refreshMs: 0, timeoutMs: 50 });
    expect(await lookup.owner('k', '1')).toBeNull();
    src.fail = false;
    src.delayMs = 500;
    expect(await lookup.owner('k', '1')).toBeNull(); // timed out
    src.delayMs = 1;
    src.grants.set('k', [{ token: 1n, owner: 'w1' }]);
    expect(await lookup.owner('k', '1')).toBe('w1');
  });

  it('bounds the reads in flight and queued: past the bound the answer is null without a read', async () => {
    const src = new Source();
    src.delayMs = 50;
    const lookup = new OwnerLookup(src, { maxConcurrent: 2, maxQueued: 3 });
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => lookup.owner(`lock:${i}`, '1')));
    expect(answers.every((a) => a === null)).toBe(true);
    expect(src.reads).toBe(5);
  });

  it('caches at most maxLocks locks', async () => {
    const src = new Source();
    src.delayMs = 0;
    const lookup = new OwnerLookup(src, { maxLocks: 2, refreshMs: 60_000 });
    await lookup.owner('a', '1');
    await lookup.owner('b', '1');
    await lookup.owner('c', '1'); // drops a
    expect(src.reads).toBe(3);
    await lookup.owner('c', '1');
    await lookup.owner('b', '1');
    expect(src.reads).toBe(3);
    await lookup.owner('a', '1');
    expect(src.reads).toBe(4);
  });
});
