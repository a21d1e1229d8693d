/**
 * POST /v1/locks/acquire-many on every store: canonical order, one lease id and one token
 * per key, all or nothing (a timeout leaves nothing held), FIFO per key, replays, leases
 * kept alive while a later key is waited for; and ordering violations of single-key
 * acquires counted, recorded and (when configured) refused with 409 lock-order.
 */
import type { FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildControl } from '../../src/control/control-server.js';
import { Issuer } from '../../src/issuer/service.js';
import { EventLog } from '../../src/observe/events.js';
import { createMetrics, type Metrics } from '../../src/observe/metrics.js';
import { STORE_FIXTURES, type Harness } from '../helpers/stores.js';
import { sleep, waitUntil } from '../helpers/wait.js';

describe.each(STORE_FIXTURES)('acquire-many on $name', (fixture) => {
  let h: Harness;
  let app: FastifyInstance;
  let issuer: Issuer;
  let events: EventLog;
  let metrics: Metrics;
  const open = async (lockOrder: 'count' | 'refuse' = 'count') => {
    metrics = createMetrics({ defaultMetrics: false });
    issuer = new Issuer(h.store, metrics, { minTtlMs: 100, maxTtlMs: 60_000, maxWaitMs: 60_000, lockOrder });
    events = new EventLog();
    app = await buildControl({
      store: h.store,
      issuer,
      metrics,
      events,
      defaultTtlMs: 10_000,
      logLevel: 'silent',
    });
  };
  beforeEach(async () => {
    h = await fixture.open();
    await open();
  });
  afterEach(async () => {
    issuer.shutdown();
    await app.close();
    await h.close();
  });

  const post = (url: string, payload: unknown) =>
    app.inject({
      method: 'POST',
      url,
      payload: JSON.stringify(payload),
      headers: { 'content-type': 'application/json' },
    });
  const many = (payload: Record<string, unknown>) => post('/v1/locks/acquire-many', payload);
  const single = (key: string, payload: Record<string, unknown>) =>
    post(`/v1/locks/${encodeURIComponent(key)}/acquire`, payload);
  const held = async (key: string) => (await h.store.inspect(key))?.held ?? false;
  const violations = async (action: string) =>
    (await metrics.lockOrderViolations.get()).values.find((v) => v.labels.action === action)?.value ?? 0;

  it('grants every key in canonical (byte) order under one lease id, one token per key; renew and release per key', async () => {
    // "B" < "a" < "é" in byte order (0x42, 0x61, 0xc3 0xa9), whatever the locale says.
    const r = await many({ keys: ['m:é', 'm:a', 'm:B'], owner: 'w1', ttlMs: 5000 });
    expect(r.statusCode).toBe(200);
    const body = r.json();
    expect(body).toMatchObject({ owner: 'w1', ttlMs: 5000, replayed: false });
    expect(body.locks.map((l: { key: string }) => l.key)).toEqual(['m:B', 'm:a', 'm:é']);
    for (const l of body.locks) {
      expect(l.token).toMatch(/^[1-9][0-9]*$/);
      const s = await h.store.inspect(l.key);
      expect(s).toMatchObject({ held: true, owner: 'w1', leaseId: body.leaseId, token: BigInt(l.token) });
    }
    for (const l of body.locks) {
      const renewed = await post(`/v1/locks/${encodeURIComponent(l.key)}/renew`, { leaseId: body.leaseId });
      expect(renewed.statusCode).toBe(200);
    }
    for (const l of body.locks) {
      const released = await post(`/v1/locks/${encodeURIComponent(l.key)}/release`, {
        leaseId: body.leaseId,
      });
      expect(released.statusCode).toBe(200);
      expect(await held(l.key)).toBe(false);
    }
  });

  it('all or nothing: a key that stays held until waitMs leaves nothing held, and names that key', async () => {
    const blocker = (await single('t:b', { owner: 'other', ttlMs: 10_000 })).json();
    const r = await many({ keys: ['t:c', 't:b', 't:a'], owner: 'w1', ttlMs: 5000, waitMs: 300 });
    expect(r.statusCode).toBe(409);
    expect(r.json()).toMatchObject({ type: 'urn:fencegate:lock-held', lock: 't:b', blockedBy: 'lease' });
    expect(await held('t:a')).toBe(false); // taken first (canonical order), released again
    expect((await h.store.inspect('t:a'))?.issued).toBeTypeOf('bigint'); // it was granted
    expect(await h.store.inspect('t:c')).toBeNull(); // never reached
    expect(await h.store.inspect('t:b')).toMatchObject({
      held: true,
      owner: 'other',
      leaseId: blocker.leaseId,
    });
  });

  it('waits in each key’s FIFO queue: a waiter queued first on a key is served first', async () => {
    const holder = (await single('q:b', { owner: 'holder', ttlMs: 10_000 })).json();
    const first = single('q:b', { owner: 'first', ttlMs: 10_000, waitMs: 10_000 });
    await waitUntil('first queued', async () => ((await h.store.inspect('q:b'))?.waiters ?? 0) === 1);
    const second = many({ keys: ['q:a', 'q:b'], owner: 'second', ttlMs: 10_000, waitMs: 10_000 });
    await waitUntil('second queued', async () => ((await h.store.inspect('q:b'))?.waiters ?? 0) === 2);
    expect(await h.store.inspect('q:a')).toMatchObject({ held: true, owner: 'second' });
    await post('/v1/locks/q%3Ab/release', { leaseId: holder.leaseId });
    const f = (await first).json();
    expect(f.owner).toBe('first');
    await post('/v1/locks/q%3Ab/release', { leaseId: f.leaseId });
    const s = await second;
    expect(s.statusCode).toBe(200);
    expect(BigInt(s.json().locks[1].token)).toBeGreaterThan(BigInt(f.token));
  });

  it('keeps the leases it took alive while it waits for a later key longer than their TTL', async () => {
    const holder = (await single('r:b', { owner: 'holder', ttlMs: 10_000 })).json();
    const waiting = many({ keys: ['r:a', 'r:b'], owner: 'w1', ttlMs: 300, waitMs: 10_000 });
    await waitUntil('r:a taken', () => held('r:a'));
    const taken = await h.store.inspect('r:a');
    await sleep(1200); // four TTLs of r:a
    expect(await h.store.inspect('r:a')).toMatchObject({
      held: true,
      leaseId: taken?.leaseId,
      token: taken?.token,
    });
    await post('/v1/locks/r%3Ab/release', { leaseId: holder.leaseId });
    const r = await waiting;
    expect(r.statusCode).toBe(200);
    expect(r.json().locks[0]).toMatchObject({ key: 'r:a', token: String(taken?.token) });
  });

  it('a retry with the same requestId replays the grant (same lease id and tokens), nothing granted twice', async () => {
    const requestId = 'retry-1';
    const a = (await many({ keys: ['p:1', 'p:2'], owner: 'w1', ttlMs: 5000, requestId })).json();
    const b = await many({ keys: ['p:2', 'p:1'], owner: 'w1', ttlMs: 5000, requestId });
    expect(b.statusCode).toBe(200);
    expect(b.json()).toMatchObject({ leaseId: a.leaseId, locks: a.locks, replayed: true });
    expect((await h.store.inspect('p:2'))?.issued).toBe(BigInt(a.locks[1].token));
    await post('/v1/locks/p%3A1/release', { leaseId: a.leaseId });
    const ended = await many({ keys: ['p:1', 'p:2'], owner: 'w1', ttlMs: 5000, requestId });
    expect(ended.json()).toMatchObject({ type: 'urn:fencegate:replay-ended', lock: 'p:1' });
    expect(await held('p:2')).toBe(true); // a replay never releases what it did not take now
  });

  it('refuses bad input with a problem naming the field', async () => {
    const cases: [unknown, string, string][] = [
      [{ owner: 'w' }, 'bad-request', 'keys'],
      [{ keys: [], owner: 'w' }, 'bad-request', 'keys'],
      [{ keys: 'a', owner: 'w' }, 'bad-request', 'keys'],
      [{ keys: ['a', 7], owner: 'w' }, 'bad-request', 'keys[1]'],
      [{ keys: ['a', 'b', 'a'], owner: 'w' }, 'bad-request', 'keys[2]'],
      [{ keys: ['a', ''], owner: 'w' }, 'invalid-key', 'keys[1]'],
      [{ keys: Array.from({ length: 65 }, (_, i) => `k${i}`), owner: 'w' }, 'bad-request', 'keys'],
      [{ keys: ['a'], owner: 'w', extra: 1 }, 'bad-request', 'extra'],
      [{ keys: ['a'], owner: 'w', ttlMs: 5 }, 'invalid-ttl', 'ttlMs'],
    ];
    for (const [payload, code, field] of cases) {
      const r = await many(payload as Record<string, unknown>);
      expect(r.statusCode, JSON.stringify(payload)).toBe(400);
      expect(r.json(), JSON.stringify(payload)).toMatchObject({ type: `urn:fencegate:${code}`, field });
    }
  });

  it('counts an owner’s out-of-order single acquire and records an event; in order is no violation', async () => {
    await single('o:b', { owner: 'w1', ttlMs: 5000 });
    expect((await single('o:c', { owner: 'w1', ttlMs: 5000 })).statusCode).toBe(200); // in order
    expect((await single('o:a', { owner: 'w2', ttlMs: 5000 })).statusCode).toBe(200); // another owner
    expect(await violations('counted')).toBe(0);
    const late = await single('o:a2', { owner: 'w1', ttlMs: 5000 });
    expect(late.statusCode).toBe(200); // counted, not refused
    expect(await violations('counted')).toBe(1);
    const [e] = events.recent(100, { types: ['lock-order'] });
    expect(e).toMatchObject({
      type: 'lock-order',
      reason: 'order-counted',
      lock: 'o:a2',
      heldKey: 'o:c',
      owner: 'w1',
      enforced: false,
    });
    // A multi-lock acquire below what the owner holds is as much out of order.
    expect((await many({ keys: ['o:0', 'o:z'], owner: 'w1', ttlMs: 5000 })).statusCode).toBe(200);
    expect(await violations('counted')).toBe(2);
  });

  it('refuses an out-of-order acquire with 409 lock-order when configured, and takes nothing', async () => {
    issuer.shutdown();
    await app.close();
    await open('refuse');
    const b = (await single('x:b', { owner: 'w1', ttlMs: 5000 })).json();
    const r = await single('x:a', { owner: 'w1', ttlMs: 5000 });
    expect(r.statusCode).toBe(409);
    expect(r.json()).toMatchObject({ type: 'urn:fencegate:lock-order', lock: 'x:a', heldKey: 'x:b' });
    expect(await h.store.inspect('x:a')).toBeNull();
    expect(await violations('refused')).toBe(1);
    expect(events.recent(100, { types: ['lock-order'] })[0]).toMatchObject({
      reason: 'order-refused',
      enforced: true,
    });
    // Once released, the same acquire is in order.
    await post('/v1/locks/x%3Ab/release', { leaseId: b.leaseId });
    expect((await single('x:a', { owner: 'w1', ttlMs: 5000 })).statusCode).toBe(200);
  });
});
