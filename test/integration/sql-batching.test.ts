/**
 * Group commit of the SQL stores' fence operations (src/store/sql/batcher.ts,
 * schema.sql fence_batch_v1): admissions and finishes called together run as one
 * statement, yet every caller gets the answer it would have got had the calls run
 * one after another (finishes first, then admissions in call order). Checked against
 * a model of the rules over seeded random rounds of concurrent calls on a few locks
 * (same lock and different locks, stale, forged, lease, shadow, ended sessions).
 * And a batch that fails fails every call in it, having changed nothing.
 *
 * Postgres only: the embedded store (LMDB, src/store/lmdb/) has no SQL batches. Its
 * concurrent calls are serialised in some order, not necessarily call order, which
 * the Store contract allows and the store contract suite checks.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { concurrentRounds, setUp } from '../helpers/fence-model.js';
import { PG_URL, postgresFixture, withPgClient, type SqlFixture } from '../helpers/sql-fixtures.js';

/** Entries of an ended session are dropped with it (docs/stores-sql.md). */
const RULES = { endedSessionsCount: false };

describe.each([{ name: 'postgres', open: postgresFixture }])('fence batches: $name', ({ name, open }) => {
  let f: SqlFixture;
  beforeAll(async () => {
    f = await open();
  }, 60_000);
  afterAll(async () => {
    await f?.close();
  });

  const seeds = name === 'postgres' ? [1, 2, 3, 4, 5, 6] : [7, 8];
  it.each(seeds)(
    'concurrent calls get the verdicts of the same calls in sequence (seed %i)',
    async (seed) => {
      await concurrentRounds(f.store, seed, RULES);
    },
    120_000,
  );

  it('two admissions of one request and lock go in separate batches, in call order', async () => {
    const store = f.store;
    const model = await setUp(store, 'dup', RULES);
    const lock = 'dup:a';
    const l = model.locks.get(lock);
    const [t1, t2] = [l?.tokens[2] ?? 0n, l?.tokens[3] ?? 0n];
    const base = { lock, check: 'token' as const, requestId: 'same', session: 'dup-live', record: true };
    const got = await Promise.all([store.admit({ ...base, token: t1 }), store.admit({ ...base, token: t2 })]);
    // As in sequence: the second finds the first's entry (a lower token) in flight.
    expect(got).toEqual([
      { ok: true, highest: t1, lowerInflight: 0 },
      { ok: true, highest: t2, lowerInflight: 1 },
    ]);
    // One entry (the second admission replaced the first), at the second token.
    expect((await store.lowerInflight(lock, t2 + 1n)).count).toBe(1);
    expect((await store.lowerInflight(lock, t2)).count).toBe(0);
  });
});

describe('a fence batch that fails (postgres)', () => {
  let f: SqlFixture & { schema: string };
  beforeAll(async () => {
    f = await postgresFixture();
  }, 60_000);
  afterAll(async () => {
    await f?.close();
  });

  it('fails every call in it with StoreUnavailableError and applies none of it', async () => {
    const store = f.store;
    const model = await setUp(store, 'fail', RULES);
    const a = model.locks.get('fail:a');
    const b = model.locks.get('fail:b');
    const ta = a?.tokens[2] ?? 0n;
    const tb = b?.tokens[3] ?? 0n;
    const base = { check: 'token' as const, session: 'fail-live', record: true };
    // An entry in flight, to be finished in the failing batch.
    expect(await store.admit({ ...base, lock: 'fail:b', token: tb, requestId: 'before' })).toMatchObject({
      ok: true,
    });
    // A statement error inside the batch, after earlier rows were written: one request id
    // the (test-only) constraint refuses, admitted last.
    await withPgClient(PG_URL, (c) =>
      c.query(`ALTER TABLE "${f.schema}".inflight ADD CONSTRAINT poison CHECK (request_id <> 'poison')`),
    );
    const calls = [
      store.finish('fail:b', 'before'),
      store.admit({ ...base, lock: 'fail:a', token: ta, requestId: 'x1' }),
      store.admit({ ...base, lock: 'fail:b', token: tb, requestId: 'x2' }),
      store.admit({ ...base, lock: 'fail:a', token: ta, requestId: 'poison' }),
    ];
    const outcomes = await Promise.allSettled(calls);
    for (const o of outcomes) {
      expect(o.status).toBe('rejected');
      if (o.status === 'rejected') expect(o.reason).toBeInstanceOf(StoreUnavailableError);
    }
    // Nothing of it happened: a's fence did not move, b's entry is still in flight, no new entries.
    expect((await store.inspect('fail:a'))?.highest ?? null).toBeNull();
    expect((await store.lowerInflight('fail:b', tb + 1n)).count).toBe(1);
    expect((await store.lowerInflight('fail:a', ta + 1n)).count).toBe(0);
    // Without the poisoned call the same store goes on as before.
    await withPgClient(PG_URL, (c) => c.query(`ALTER TABLE "${f.schema}".inflight DROP CONSTRAINT poison`));
    const again = await Promise.all([
      store.finish('fail:b', 'before'),
      store.admit({ ...base, lock: 'fail:a', token: ta, requestId: 'x1' }),
    ]);
    expect(again[1]).toEqual({ ok: true, highest: ta, lowerInflight: 0 });
    expect((await store.lowerInflight('fail:b', tb + 1n)).count).toBe(0);
  });
});
