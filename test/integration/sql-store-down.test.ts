/**
 * Fail fast, fail closed, recover: a Postgres store on a cluster of its own that
 * the test crashes (pg_ctl stop -m immediate), hangs (SIGSTOP) and starts again.
 * While Postgres is away every operation throws StoreUnavailableError within
 * seconds; once it is back the same store works again, without reopening.
 */
import { once } from 'node:events';
import { createServer, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { openPostgresStore } from '../../src/store/sql/store.js';
import type { Store } from '../../src/store/types.js';
import { startCluster, type Cluster } from '../helpers/sql-cluster.js';
import { sleep } from '../helpers/sql-fixtures.js';

/** Runs `op`, expecting StoreUnavailableError; returns how long it took. */
/** Runs op, which must fail with StoreUnavailableError; returns the error's message. */
async function unavailable(op: () => Promise<unknown>): Promise<string> {
  const err = await op().then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreUnavailableError);
  return (err as Error).message;
}

/** What a call ended by a client-side timeout says (driver.ts classify, pg's own messages). */
const TIMED_OUT = /timed out|timeout/i;

async function eventually(op: () => Promise<unknown>, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    try {
      await op();
      return;
    } catch (err) {
      if (Date.now() > end) throw err;
      await sleep(100);
    }
  }
}

describe('Postgres store when Postgres goes away', () => {
  let cluster: Cluster;
  let store: Store;
  beforeAll(async () => {
    cluster = await startCluster();
    store = await openPostgresStore(cluster.url, { namespace: 'down_test' });
  }, 60_000);
  afterAll(async () => {
    await store?.close();
    await cluster?.destroy();
  });

  it('says in health() that this server runs with fsync off', async () => {
    const h = await store.health();
    expect(h).toMatchObject({ ok: true, kind: 'postgres' });
    expect(h.detail).toContain('NOT crash-safe: fsync is off');
  });

  it('throws StoreUnavailableError quickly while it is down, and works again once it is back', async () => {
    const a = await store.tryAcquire({ key: 'k', owner: 'o', ttlMs: 60_000 });
    if (!a.ok) throw new Error('expected a grant');
    let notified = 0;
    await store.watch('k', () => notified++);

    await cluster.stop();
    const messages = [
      await unavailable(() => store.tryAcquire({ key: 'k2', owner: 'o', ttlMs: 1000 })),
      await unavailable(() => store.renew('k', a.lease.leaseId, 60_000)),
      await unavailable(() => store.release('k', a.lease.leaseId)),
      await unavailable(() =>
        store.admit({
          lock: 'k',
          token: a.lease.token,
          check: 'token',
          requestId: 'r',
          session: 's',
          record: true,
        }),
      ),
      await unavailable(() => store.inspect('k')),
      await unavailable(() => store.enqueueWaiter('k', 'w', 1000)),
      await unavailable(() => store.now()),
      await unavailable(() => store.watch('other', () => undefined)),
    ];
    // Refused at once by the stopped server, not ended by a client timeout.
    for (const m of messages) expect(m).not.toMatch(TIMED_OUT);
    const h = await store.health();
    expect(h.ok).toBe(false);
    expect(h.detail).toMatch(/ECONNREFUSED|connection/);

    await cluster.start();
    await eventually(() => store.now());
    // Nothing was lost (the crash was of the server process, not of the disk).
    expect(await store.inspect('k')).toMatchObject({ held: true, leaseId: a.lease.leaseId });
    // The LISTEN connection came back on its own: one resync call, then real notifications.
    await eventually(async () => {
      if (notified < 1) throw new Error('no resync yet');
    });
    const before = notified;
    expect(await store.release('k', a.lease.leaseId)).toEqual({ ok: true });
    await eventually(async () => {
      if (notified <= before) throw new Error('no notification yet');
    }, 5000);
    expect((await store.health()).ok).toBe(true);
  }, 60_000);

  it('fails every admission and finish of a batch while it is down; none of them is applied', async () => {
    const a = await store.tryAcquire({ key: 'b1', owner: 'o', ttlMs: 60_000 });
    const b = await store.tryAcquire({ key: 'b2', owner: 'o', ttlMs: 60_000 });
    if (!a.ok || !b.ok) throw new Error('expected grants');
    await store.openSession('sb', 60_000);
    const admit = (lock: string, token: bigint, requestId: string) =>
      store.admit({ lock, token, check: 'token', requestId, session: 'sb', record: true });
    expect(await admit('b1', a.lease.token, 'held')).toMatchObject({ ok: true });

    await cluster.stop();
    // Called in one turn: one batch (a finish, admissions on the same and another lock).
    const outcomes = await Promise.allSettled([
      store.finish('b1', 'held'),
      admit('b1', a.lease.token, 'x1'),
      admit('b1', a.lease.token, 'x2'),
      admit('b2', b.lease.token, 'x3'),
    ]);
    for (const o of outcomes) {
      expect(o.status).toBe('rejected');
      if (o.status === 'rejected') expect(o.reason).toBeInstanceOf(StoreUnavailableError);
    }

    await cluster.start();
    await eventually(() => store.now());
    // The entry before is still in flight; none of the batch's entries or fences exist.
    expect((await store.lowerInflight('b1', a.lease.token + 1n)).count).toBe(1);
    expect((await store.inspect('b2'))?.highest ?? null).toBeNull();
    expect((await store.lowerInflight('b2', b.lease.token + 1n)).count).toBe(0);
  }, 60_000);

  it('gives up on a hung server within the client timeouts, then recovers', async () => {
    expect((await store.tryAcquire({ key: 'h', owner: 'o', ttlMs: 1000 })).ok).toBe(true);
    await cluster.pause();
    try {
      const messages = await Promise.all([
        unavailable(() => store.tryAcquire({ key: 'h2', owner: 'o', ttlMs: 1000 })),
        unavailable(() => store.now()),
      ]);
      // The paused server never answers: each call was ended by a client-side timeout.
      for (const m of messages) expect(m).toMatch(TIMED_OUT);
    } finally {
      await cluster.resume();
    }
    await eventually(() => store.now());
    expect((await store.tryAcquire({ key: 'h3', owner: 'o', ttlMs: 1000 })).ok).toBe(true);
  }, 60_000);
});

describe('opening a Postgres store', () => {
  it('rejects within the connect timeout when the server accepts TCP but never answers', async () => {
    const sockets: Socket[] = [];
    const silent = createServer((s) => sockets.push(s));
    silent.listen(0, '127.0.0.1');
    await once(silent, 'listening');
    const port = (silent.address() as { port: number }).port;
    try {
      const err = await openPostgresStore(`postgres://postgres@127.0.0.1:${port}/x`).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StoreUnavailableError);
      expect((err as Error).message).toMatch(TIMED_OUT); // the connect timeout ended it
      expect((err as Error).message).toMatch(/^cannot open the Postgres store/);
      expect((err as Error).message).toContain(`127.0.0.1:${port}`);
    } finally {
      for (const s of sockets) s.destroy();
      silent.close();
    }
  });
});
