/**
 * What only the Postgres store has: several processes (here: several stores, each
 * with its own pool) on one schema, the schema init race, LISTEN on a dedicated
 * connection that comes back, exact bigint tokens, a clear error when unreachable.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { queriesFor } from '../../src/store/sql/queries.js';
import { openPostgresStore } from '../../src/store/sql/store.js';
import type { Store } from '../../src/store/types.js';
import { MAX_TOKEN } from '../../src/tokens.js';
import { dropSchema, PG_URL, randomSchema, sleep, withPgClient } from '../helpers/sql-fixtures.js';
import { seedPostgresIssued } from '../helpers/sql-seed.js';
import { freePort } from '../helpers/procs.js';
import { waitUntil } from '../helpers/wait.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

/** Opens `n` stores on one fresh schema at the same time; dropped after the test. */
async function openMany(n: number): Promise<{ schema: string; stores: Store[] }> {
  const schema = randomSchema();
  cleanups.push(() => dropSchema(PG_URL, schema));
  const settled = await Promise.allSettled(
    Array.from({ length: n }, () => openPostgresStore(PG_URL, { namespace: schema })),
  );
  const stores = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  cleanups.push(async () => {
    await Promise.all(stores.map((s) => s.close()));
  });
  for (const s of settled) if (s.status === 'rejected') throw s.reason;
  return { schema, stores };
}

const until = (cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> =>
  waitUntil(what, cond, { timeoutMs, everyMs: 10 });

describe('Postgres store', () => {
  it('creates its schema once when several processes open it at the same time', async () => {
    const { schema, stores } = await openMany(6);
    expect(stores).toHaveLength(6);
    const epochs = await withPgClient(PG_URL, (c) => c.query(`SELECT id FROM "${schema}".epoch`));
    expect(epochs.rowCount).toBe(1);
    const health = await Promise.all(stores.map((s) => s.health()));
    expect(new Set(health.map((h) => h.epoch?.id)).size).toBe(1);
    expect(health[0]?.detail).toContain('fsync on, synchronous_commit on');
  });

  it('grants strictly increasing tokens to clients of several processes contending on one key', async () => {
    const { stores } = await openMany(3);
    const key = 'contended';
    const grants: bigint[] = [];
    const client = async (store: Store, c: number): Promise<void> => {
      for (let i = 0; i < 25;) {
        const r = await store.tryAcquire({ key, owner: `c${c}`, ttlMs: 10_000 });
        if (!r.ok) {
          await sleep(1);
          continue;
        }
        grants.push(r.lease.token); // recorded while holding: grant order
        expect(await store.release(key, r.lease.leaseId)).toEqual({ ok: true });
        i++;
      }
    };
    await Promise.all(stores.flatMap((s, si) => [0, 1, 2].map((c) => client(s, si * 3 + c))));
    expect(grants).toHaveLength(225);
    for (let i = 1; i < grants.length; i++) expect(grants[i]).toBe((grants[i - 1] as bigint) + 1n);
  }, 60_000);

  it('delivers notifications across processes', async () => {
    const { stores } = await openMany(2);
    const [a, b] = stores as [Store, Store];
    let calls = 0;
    await b.watch('x', () => calls++);
    const r = await a.tryAcquire({ key: 'x', owner: 'o', ttlMs: 1000 });
    if (!r.ok) throw new Error('expected a grant');
    await a.release('x', r.lease.leaseId);
    await until(() => calls >= 1, 'the release notification');
  });

  it('re-listens after its LISTEN connection is killed, and calls every listener once', async () => {
    const { schema, stores } = await openMany(2);
    const [a, b] = stores as [Store, Store];
    let calls = 0;
    await b.watch('y', () => calls++);
    const killed = await withPgClient(PG_URL, (c) =>
      c.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE pid <> pg_backend_pid() AND query = $1`,
        [`LISTEN "fencegate:${schema}"`],
      ),
    );
    expect(killed.rowCount).toBe(1);
    await until(() => calls >= 1, 'the resync call after reconnecting');
    const before = calls;
    const r = await a.tryAcquire({ key: 'y', owner: 'o', ttlMs: 1000 });
    if (!r.ok) throw new Error('expected a grant');
    await a.release('y', r.lease.leaseId);
    await until(() => calls > before, 'a notification on the new connection');
  });

  it('keeps tokens exact above 2^53: stored as bigint, read as text', async () => {
    const { schema, stores } = await openMany(1);
    const store = stores[0] as Store;
    const key = 'big';
    await seedPostgresIssued(PG_URL, schema, key, 2n ** 53n + 1n);
    const r = await store.tryAcquire({ key, owner: 'o', ttlMs: 1000 });
    expect(r.ok && r.lease.token).toBe(2n ** 53n + 2n);
    const row = await withPgClient(PG_URL, (c) =>
      c.query<{ issued: string; kind: string }>(
        `SELECT issued::text AS issued, pg_typeof(issued)::text AS kind FROM "${schema}".locks WHERE key = $1`,
        [key],
      ),
    );
    expect(row.rows[0]).toEqual({ issued: '9007199254740994', kind: 'bigint' });
    await seedPostgresIssued(PG_URL, schema, key, MAX_TOKEN - 1n);
    if (r.ok) await store.release(key, r.lease.leaseId);
    const last = await store.tryAcquire({ key, owner: 'o', ttlMs: 1000 });
    expect(last.ok && last.lease.token).toBe(MAX_TOKEN);
    expect((await store.inspect(key))?.issued).toBe(MAX_TOKEN);
  });

  it('starts a new epoch above the old state when the epoch record was lost', async () => {
    const { schema, stores } = await openMany(1);
    const store = stores[0] as Store;
    const before = await store.health();
    await withPgClient(PG_URL, (c) => c.query(`DELETE FROM "${schema}".epoch`));
    await sleep(5);
    const again = await openPostgresStore(PG_URL, { namespace: schema });
    cleanups.push(() => again.close());
    const after = await again.health();
    expect(after.epoch?.id).not.toBe(before.epoch?.id);
    expect(after.epoch?.floor).toBeGreaterThan(before.epoch?.floor ?? 0n);
  });

  it('housekeeping prunes expired waiters, orphaned in-flight entries and idempotency records, and only those', async () => {
    const { schema, stores } = await openMany(1);
    const store = stores[0] as Store;
    // The first grant also starts the store's own housekeeping round (then none for 30 s).
    const g = await store.tryAcquire({ key: 'f', owner: 'o', ttlMs: 60_000, requestId: 'old' });
    if (!g.ok) throw new Error('expected a grant');
    await sleep(100);
    await store.enqueueWaiter('q1', 'expired', 1);
    await store.enqueueWaiter('q2', 'live', 60_000);
    const admit = (requestId: string, session: string) =>
      store.admit({
        lock: 'f',
        token: g.lease.token,
        check: 'token',
        requestId,
        session,
        record: true,
      });
    await store.openSession('live-session', 60_000);
    await admit('live', 'live-session');
    await admit('orphan', 'ended-session'); // its session is gone: it can never finish
    await withPgClient(PG_URL, (c) =>
      c.query(`UPDATE "${schema}".grants SET keep_until = 0 WHERE request_id = 'old'`),
    );
    // Idempotency records (the gateway's Idempotency-Key): one whose time passed, one kept.
    for (const key of ['idem-old', 'idem-live'])
      await store.beginIdempotent({ key, fingerprint: 'f', attempt: 'a', holdMs: 60_000 });
    await withPgClient(PG_URL, (c) =>
      c.query(`UPDATE "${schema}".idempotency SET until = 0 WHERE key = 'idem-old'`),
    );
    await sleep(20);
    const pruned = await withPgClient(PG_URL, (c) => c.query(queriesFor(schema).prune, [100]));
    expect(pruned.rows[0]).toEqual({ grants: 1, waiters: 1, inflight: 1, idempotency: 1 });
    expect(
      await store.beginIdempotent({ key: 'idem-live', fingerprint: 'f', attempt: 'b', holdMs: 1 }),
    ).toMatchObject({
      state: 'in-flight',
    });
    expect((await store.inspect('f'))?.issued).toBe(g.lease.token);
    expect((await store.inspect('q2'))?.waiters ?? 0).toBe(0); // q2 was never issued: null
    expect((await store.listLocks({ limit: 100, prefix: '', after: null })).locks.map((l) => l.key)).toEqual([
      'f',
    ]);
    expect((await store.lowerInflight('f', g.lease.token + 1n)).count).toBe(1);
    const again = await withPgClient(PG_URL, (c) => c.query(queriesFor(schema).prune, [100]));
    expect(again.rows[0]).toEqual({ grants: 0, waiters: 0, inflight: 0, idempotency: 0 });
  });

  it('refuses to open quickly, in one line, when Postgres is unreachable', async () => {
    const port = await freePort();
    const err = await openPostgresStore(`postgres://postgres@127.0.0.1:${port}/test`, {
      namespace: randomSchema(),
    }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreUnavailableError);
    const message = (err as Error).message;
    expect(message).toContain(`127.0.0.1:${port}`);
    expect(message).toContain('ECONNREFUSED');
    expect(message).not.toContain('\n');
  });

  it('refuses a namespace that is not a plain identifier', async () => {
    await expect(openPostgresStore(PG_URL, { namespace: 'bad"name' })).rejects.toBeInstanceOf(
      StoreUnavailableError,
    );
    await expect(openPostgresStore(PG_URL, { namespace: 'pg_catalog' })).rejects.toThrow(/namespace/);
  });
});
