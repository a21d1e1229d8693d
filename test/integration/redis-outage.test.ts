/**
 * Redis going away under a running store: operations fail fast with
 * StoreUnavailableError (fail closed; nothing queued up to replay later), a paused Redis
 * hits the command timeout, and everything works again once Redis is back, including
 * scripts (reloaded on the new connection) and watch subscriptions.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import type { Store } from '../../src/store/types.js';
import { openTestRedisStore, type OpenedRedisStore } from '../helpers/redis-fixture.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { sleep } from '../helpers/wait.js';

let server: RedisServer;
let t: OpenedRedisStore;
let store: Store;
beforeAll(async () => {
  server = await startRedisServer();
  t = await openTestRedisStore(server.url);
  store = t.store;
});
afterAll(async () => {
  await store.close();
  await server.stop();
});

/** Rejects with StoreUnavailableError, and how long that took. */
/** Runs op, which must fail with StoreUnavailableError; returns the error's message. */
async function unavailable(op: () => Promise<unknown>): Promise<string> {
  const err = await op().then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreUnavailableError);
  return (err as Error).message;
}

/** The message of a command that ran into the client's command timeout (connection.ts). */
const COMMAND_TIMED_OUT = /no reply within \d+ ms/;

async function eventually<T>(op: () => Promise<T>, timeoutMs = 8000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await op();
    } catch (err) {
      if (Date.now() > end) throw err;
      await sleep(50);
    }
  }
}

describe('Redis down and back', () => {
  it('fails fast while down and recovers, with tokens above every earlier one', async () => {
    const a = await store.tryAcquire({ key: 'k', owner: 'a', ttlMs: 60_000 });
    if (!a.ok) throw new Error('no grant');
    let notified = 0;
    const off = await store.watch('k', () => notified++);

    await server.kill();
    const ops: (() => Promise<unknown>)[] = [
      () => store.tryAcquire({ key: 'k', owner: 'b', ttlMs: 1000 }),
      () => store.renew('k', a.lease.leaseId, 1000),
      () => store.release('k', a.lease.leaseId),
      () => store.inspect('k'),
      () =>
        store.admit({
          lock: 'k',
          token: a.lease.token,
          check: 'token',
          requestId: 'r',
          session: 's',
          record: true,
        }),
      () => store.finish('k', 'r'),
      () => store.lowerInflight('k', a.lease.token),
      () => store.dropInflight('k', ['s'], 0),
      () => store.openSession('s2', 1000),
      () => store.beatSession('s'),
      () => store.readSessions(null),
      () => store.endSession('s', 0),
      () => store.enqueueWaiter('k', 'w', 1000),
      () => store.removeWaiter('k', 'w'),
      () => store.listLocks({ limit: 10, prefix: '', after: null }),
      () => store.bumpEpoch(),
      () => store.now(),
      () => store.watch('other', () => undefined),
    ];
    // Failed at once on the closed connection, not by waiting for the command timeout.
    for (const op of ops) expect(await unavailable(op)).not.toMatch(COMMAND_TIMED_OUT);
    expect(await store.health()).toMatchObject({ ok: false, kind: 'redis', epoch: null });

    await server.start(); // empty: no persistence
    const b = await eventually(async () => {
      const r = await store.tryAcquire({ key: 'k', owner: 'b', ttlMs: 60_000 });
      if (!r.ok) throw new Error('held');
      return r;
    });
    expect(b.lease.token).toBeGreaterThan(a.lease.token); // a new epoch, above the old one
    expect(await store.health()).toMatchObject({ ok: true });

    // The subscription came back: a spurious wake-up on reconnect, then real messages.
    await eventually(async () => {
      if (notified === 0) throw new Error('no wake-up after reconnect');
    });
    const before = notified;
    await eventually(async () => {
      const r = await store.release('k', b.lease.leaseId);
      expect(r).toEqual({ ok: true });
    });
    await eventually(async () => {
      if (notified === before) throw new Error('no release notification');
    });
    off();
  }, 30_000);

  it('a paused Redis makes commands time out (about 2 s), not hang', async () => {
    await eventually(() => store.now());
    server.pause();
    try {
      // Ended by the client's command timeout (the server never answers while paused).
      expect(await unavailable(() => store.inspect('k'))).toMatch(COMMAND_TIMED_OUT);
    } finally {
      server.resume();
    }
    await eventually(() => store.inspect('k'));
  }, 20_000);
});
