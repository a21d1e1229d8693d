/**
 * Fence batches on Redis (src/store/redis/fence-batch.ts, scripts/fence_batch.lua): the
 * admissions and finishes called in one turn of the event loop go to Redis as one script
 * call, yet every caller gets the answer it would have got had the calls run one after
 * another in call order (checked against the model in test/helpers/fence-model.ts over
 * seeded rounds); a call that fails inside a batch fails alone; and a turn's calls really
 * are one command (counted on a private redis-server).
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { lockKeys } from '../../src/store/redis/keys.js';
import { openRedisStore } from '../../src/store/redis/store.js';
import type { Store } from '../../src/store/types.js';
import { concurrentRounds, setUp } from '../helpers/fence-model.js';
import { openTestRedisStore, type OpenedRedisStore } from '../helpers/redis-fixture.js';
import { redisCall } from '../helpers/redis-seed.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { sleep } from '../helpers/wait.js';

/** Redis drops an ended session's entries lazily: its admissions still count them. */
const RULES = { endedSessionsCount: true };

describe('fence batches: redis', () => {
  let t: OpenedRedisStore;
  beforeAll(async () => {
    t = await openTestRedisStore();
  });
  afterAll(async () => {
    await t?.close();
  });

  it.each([1, 2, 3, 4, 5, 6])(
    'concurrent calls get the verdicts of the same calls in sequence (seed %i)',
    async (seed) => {
      await concurrentRounds(t.store, seed, RULES);
    },
    120_000,
  );

  it('a call that fails inside a batch fails alone; the others are answered and applied', async () => {
    const store = t.store;
    const model = await setUp(store, 'one', RULES);
    const ta = model.locks.get('one:a')?.tokens[3] ?? 0n;
    const tb = model.locks.get('one:b')?.tokens[3] ?? 0n;
    const base = { check: 'token' as const, session: 'one-live', record: true };
    expect(await store.admit({ ...base, lock: 'one:b', token: tb, requestId: 'before' })).toMatchObject({
      ok: true,
    });
    // Lock c's fence key holds a hash: its GET fails with WRONGTYPE inside the script.
    const tc = model.locks.get('one:c')?.tokens[3] ?? 0n;
    await redisCall(t.url, 'HSET', lockKeys(t.prefix, 'one:c').fence, 'x', '1');
    const outcomes = await Promise.allSettled([
      store.finish('one:b', 'before'),
      store.admit({ ...base, lock: 'one:a', token: ta, requestId: 'x1' }),
      store.admit({ ...base, lock: 'one:c', token: tc, requestId: 'x2' }),
      store.admit({ ...base, lock: 'one:b', token: tb, requestId: 'x3' }),
    ]);
    expect(outcomes[0]).toEqual({ status: 'fulfilled', value: undefined });
    expect(outcomes[1]).toEqual({ status: 'fulfilled', value: { ok: true, highest: ta, lowerInflight: 0 } });
    expect(outcomes[2]?.status).toBe('rejected');
    if (outcomes[2]?.status === 'rejected') {
      expect(outcomes[2].reason).toBeInstanceOf(StoreUnavailableError);
      expect(String(outcomes[2].reason.message)).toMatch(/WRONGTYPE/);
    }
    expect(outcomes[3]).toEqual({ status: 'fulfilled', value: { ok: true, highest: tb, lowerInflight: 0 } });
    // Applied: a's fence moved, b has only x3 in flight, c has nothing.
    expect((await store.inspect('one:a'))?.highest).toBe(ta);
    expect((await store.lowerInflight('one:b', tb + 1n)).count).toBe(1);
    expect(Number(await redisCall(t.url, 'HLEN', lockKeys(t.prefix, 'one:c').inf))).toBe(0);
  });
});

describe('fence batches: one script call per turn (private redis-server)', () => {
  let server: RedisServer;
  let store: Store;
  beforeAll(async () => {
    server = await startRedisServer();
    store = await openRedisStore(server.url, { namespace: 'fb', allowVolatileRedis: true });
  }, 30_000);
  afterAll(async () => {
    await store?.close();
    await server?.stop();
  });

  /** Calls of each command since the last reset. */
  async function commandCalls(): Promise<Map<string, number>> {
    const info = String(await redisCall(server.url, 'INFO', 'commandstats'));
    const out = new Map<string, number>();
    for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out.set(m[1] ?? '', Number(m[2]));
    return out;
  }

  /** The script calls and epoch reads Redis runs during `run`, in order (MONITOR). */
  async function scriptCallsDuring(run: () => Promise<void>): Promise<string[]> {
    const client = new Redis(server.url);
    const monitor = await client.monitor();
    const seen: string[] = [];
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args[0] === 'evalsha' || args[0] === 'eval' || (args[0] === 'hmget' && args[1] === 'fb:epoch'))
        seen.push(args[0]);
    });
    try {
      await run();
      await sleep(200);
    } finally {
      monitor.disconnect();
      client.disconnect();
    }
    return seen;
  }

  it('sends 40 admissions and 40 finishes called in one turn as one script call each', async () => {
    const model = await setUp(store, 'turn', RULES);
    const tokens = ['turn:a', 'turn:b'].map((k) => model.locks.get(k)?.tokens[3] ?? 0n);
    const admit = (i: number) =>
      store.admit({
        lock: i % 2 === 0 ? 'turn:a' : 'turn:b',
        token: tokens[i % 2] ?? 0n,
        check: 'token',
        requestId: `r${i}`,
        session: 'turn-live',
        record: true,
      });
    // Warm: the first batch reads the epoch floor before it is sent.
    await admit(-2);
    await store.finish('turn:a', 'r-2');
    await redisCall(server.url, 'CONFIG', 'RESETSTAT');
    const ids = Array.from({ length: 40 }, (_, i) => i);
    const admitted = await Promise.all(ids.map(admit));
    expect(admitted.every((r) => r.ok)).toBe(true);
    await Promise.all(ids.map((i) => store.finish(i % 2 === 0 ? 'turn:a' : 'turn:b', `r${i}`)));
    const calls = await commandCalls();
    // One script call per turn (with its epoch re-read behind the admissions), not 80.
    expect(calls.get('evalsha')).toBe(2);
    expect(calls.get('hmget')).toBe(1 + 40); // the re-read, and one HMGET of ctr per admission inside the script
    expect(calls.get('hdel')).toBe(40);
    expect(calls.get('publish')).toBe(2); // one per lock that had finishes
    for (const k of ['turn:a', 'turn:b'])
      expect((await store.lowerInflight(k, 2n ** 63n - 1n)).count).toBe(0);
  });
  it('reads the epoch floor again behind the batch, never before it', async () => {
    const model = await setUp(store, 'order', RULES);
    const token = model.locks.get('order:a')?.tokens[3] ?? 0n;
    const base = { lock: 'order:a', token, check: 'token' as const, session: 'order-live', record: true };
    await store.admit({ ...base, requestId: 'warm' }); // the first batch reads the floor first
    const seen = await scriptCallsDuring(async () => {
      await store.admit({ ...base, requestId: 'watched' });
    });
    // Redis runs them in this order: the read shows the floor at or after the admission ran.
    expect(seen).toEqual(['evalsha', 'hmget']);
  });

  it('sends the source once per connection (EVAL), then the hash (EVALSHA)', async () => {
    // A store of its own: its connection has not sent the script yet.
    const fresh = await openRedisStore(server.url, { namespace: 'fb2', allowVolatileRedis: true });
    try {
      const model = await setUp(fresh, 'src', RULES);
      const token = model.locks.get('src:a')?.tokens[3] ?? 0n;
      await redisCall(server.url, 'CONFIG', 'RESETSTAT');
      for (let i = 0; i < 3; i++) {
        const r = await fresh.admit({
          lock: 'src:a',
          token,
          check: 'token',
          requestId: `s${i}`,
          session: 'src-live',
          record: true,
        });
        expect(r).toMatchObject({ ok: true, highest: token });
      }
      const calls = await commandCalls();
      expect(calls.get('eval')).toBe(1);
      expect(calls.get('evalsha')).toBe(2);
    } finally {
      await fresh.close();
    }
  });

  it('after SCRIPT FLUSH: the batch answered NOSCRIPT is sent again with the source, and applied once', async () => {
    const model = await setUp(store, 'flush', RULES);
    const token = model.locks.get('flush:a')?.tokens[3] ?? 0n;
    const base = { lock: 'flush:a', token, check: 'token' as const, session: 'flush-live', record: true };
    await store.admit({ ...base, requestId: 'warm' });
    await redisCall(server.url, 'SCRIPT', 'FLUSH');
    const seen = await scriptCallsDuring(async () => {
      const r = await store.admit({ ...base, requestId: 'after-flush' });
      expect(r).toEqual({ ok: true, highest: token, lowerInflight: 0 });
      await store.admit({ ...base, requestId: 'next' });
    });
    // NOSCRIPT (nothing ran), then the source with the floor read again behind it; then the hash again.
    expect(seen).toEqual(['evalsha', 'hmget', 'eval', 'hmget', 'evalsha', 'hmget']);
    const entries = (await redisCall(server.url, 'HKEYS', lockKeys('fb', 'flush:a').inf)) as string[];
    expect(entries.sort()).toEqual(['after-flush', 'next', 'warm']);
  });

  it('encodes lock names and request ids by their UTF-8 length', async () => {
    const model = await setUp(store, 'üñí—🙂', RULES);
    const lock = 'üñí—🙂:a';
    const token = model.locks.get(lock)?.tokens[3] ?? 0n;
    const base = { lock, token, check: 'token' as const, session: 'üñí—🙂-live', record: true };
    const [one, two] = await Promise.all([
      store.admit({ ...base, requestId: 'naïve-✓' }),
      store.admit({ ...base, requestId: 'plain' }),
    ]);
    expect(one).toEqual({ ok: true, highest: token, lowerInflight: 0 });
    expect(two).toEqual({ ok: true, highest: token, lowerInflight: 0 });
    const entries = (await redisCall(server.url, 'HKEYS', lockKeys('fb', lock).inf)) as string[];
    expect(entries.sort()).toEqual(['naïve-✓', 'plain']);
  });
});
