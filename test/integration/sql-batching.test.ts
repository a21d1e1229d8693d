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
import type { AdmitRequest, AdmitResult, Store } from '../../src/store/types.js';
import { PG_URL, postgresFixture, withPgClient, type SqlFixture } from '../helpers/sql-fixtures.js';

/** mulberry32: a small seeded PRNG, so a failing seed can be replayed. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface LockModel {
  key: string;
  /** null: the key has no row (nothing ever issued). */
  floor: bigint | null;
  issued: bigint | null;
  /** The token of the live lease, if any. */
  leaseToken: bigint | null;
  highest: bigint | null;
  /** Tokens a caller may present: floor, each issued one, one above the last (forged). */
  tokens: bigint[];
  /** The live lease's id (to release it before a new grant). */
  leaseId: string | null;
}

interface Entry {
  lock: string;
  requestId: string;
  token: bigint;
  session: string;
}

/** The rules of docs/stores-sql.md, one call at a time. */
class Model {
  readonly entries = new Map<string, Entry>();
  constructor(
    readonly locks: Map<string, LockModel>,
    readonly liveSessions: Set<string>,
  ) {}

  finish(lock: string, requestId: string): void {
    this.entries.delete(`${lock}\u0000${requestId}`);
  }

  admit(req: AdmitRequest): AdmitResult {
    const l = this.locks.get(req.lock);
    if (!l || l.floor === null) return { ok: false, reason: 'forged', highest: null };
    const highest = l.highest;
    if (req.token <= l.floor) return { ok: false, reason: 'stale', highest };
    if (l.issued === null || req.token > l.issued) return { ok: false, reason: 'forged', highest };
    if (highest !== null && req.token < highest) return { ok: false, reason: 'stale', highest };
    if (req.check === 'lease' && l.leaseToken !== req.token)
      return { ok: false, reason: 'lease-expired', highest };
    let lower = 0;
    for (const e of this.entries.values()) {
      if (e.lock === req.lock && e.token < req.token && this.liveSessions.has(e.session)) lower += 1;
    }
    const after = highest === null || req.token > highest ? req.token : highest;
    if (req.record) {
      l.highest = after;
      this.entries.set(`${req.lock}\u0000${req.requestId}`, {
        lock: req.lock,
        requestId: req.requestId,
        token: req.token,
        session: req.session,
      });
    }
    return { ok: true, highest: after, lowerInflight: lower };
  }
}

/** Locks a..c with three grants each (c released: no live lease), and d never issued. */
async function setUp(store: Store, prefix: string): Promise<Model> {
  const locks = new Map<string, LockModel>();
  for (const name of ['a', 'b', 'c']) {
    const key = `${prefix}:${name}`;
    const issued: bigint[] = [];
    let leaseId = '';
    for (let i = 0; i < 3; i++) {
      const r = await store.tryAcquire({ key, owner: 'w', ttlMs: 600_000 });
      if (!r.ok) throw new Error(`no grant for ${key}: ${JSON.stringify(r)}`);
      issued.push(r.lease.token);
      leaseId = r.lease.leaseId;
      if (i < 2) await store.release(key, leaseId);
    }
    if (name === 'c') await store.release(key, leaseId);
    const first = issued[0] ?? 0n;
    const last = issued[2] ?? 0n;
    // The first token is one above the key's floor (the epoch floor is far below it).
    locks.set(key, {
      key,
      floor: first - 1n,
      issued: last,
      leaseToken: name === 'c' ? null : last,
      highest: null,
      tokens: [first - 1n, ...issued, last + 1n],
      leaseId: name === 'c' ? null : leaseId,
    });
  }
  const never = `${prefix}:d`;
  locks.set(never, {
    key: never,
    floor: null,
    issued: null,
    leaseToken: null,
    highest: null,
    tokens: [1n],
    leaseId: null,
  });
  await store.openSession(`${prefix}-live`, 60_000);
  await store.openSession(`${prefix}-ended`, 60_000);
  await store.endSession(`${prefix}-ended`, null);
  return new Model(locks, new Set([`${prefix}-live`]));
}

/** A new owner takes a live lock: a new token, so the fence has further to climb. */
async function regrant(store: Store, l: LockModel): Promise<void> {
  if (l.leaseId === null || l.issued === null) return;
  await store.release(l.key, l.leaseId);
  const r = await store.tryAcquire({ key: l.key, owner: 'w', ttlMs: 600_000 });
  if (!r.ok) throw new Error(`no grant for ${l.key}: ${JSON.stringify(r)}`);
  l.leaseId = r.lease.leaseId;
  l.leaseToken = r.lease.token;
  l.issued = r.lease.token;
  // The floor, the last four issued, and one above the last.
  const issued = l.tokens.slice(1, -1);
  l.tokens = [l.tokens[0] ?? 0n, ...issued.slice(-3), r.lease.token, r.lease.token + 1n];
}

const pick = <T>(r: () => number, xs: readonly T[]): T => {
  const x = xs[Math.floor(r() * xs.length)];
  if (x === undefined) throw new Error('pick from an empty list');
  return x;
};

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
      const store = f.store;
      const r = rng(seed);
      const prefix = `batch${seed}`;
      const model = await setUp(store, prefix);
      const keys = [...model.locks.keys()];
      const sessions = [`${prefix}-live`, `${prefix}-live`, `${prefix}-ended`];
      let next = 0;
      let sizes = 0;
      for (let round = 0; round < 25; round++) {
        if (r() < 0.3) {
          const l = model.locks.get(pick(r, keys.slice(0, 2)));
          if (l) await regrant(store, l);
        }
        // Finishes of some entries in flight, then admissions, all called in one turn.
        const open = [...model.entries.values()].filter(() => r() < 0.3);
        const admissions: AdmitRequest[] = [];
        const n = 1 + Math.floor(r() * 12);
        for (let i = 0; i < n; i++) {
          const lock = pick(r, r() < 0.6 ? keys.slice(0, 1) : keys);
          const l = model.locks.get(lock);
          admissions.push({
            lock,
            token: pick(r, l?.tokens ?? [1n]),
            check: r() < 0.2 ? 'lease' : 'token',
            requestId: `${prefix}-r${next++}`,
            session: pick(r, sessions),
            record: r() < 0.85,
          });
        }
        const calls = [
          ...open.map((e) => store.finish(e.lock, e.requestId)),
          ...admissions.map((a) => store.admit(a)),
        ];
        const got = (await Promise.all(calls)).slice(open.length);
        for (const e of open) model.finish(e.lock, e.requestId);
        const want = admissions.map((a) => model.admit(a));
        expect(got, `seed ${seed} round ${round}`).toEqual(want);
        sizes += calls.length;
      }
      expect(sizes).toBeGreaterThan(25);
      // The state left behind is the model's too.
      for (const [key, l] of model.locks) {
        const state = await store.inspect(key);
        expect(state?.highest ?? null, key).toBe(l.highest);
        const live = [...model.entries.values()].filter(
          (e) => e.lock === key && model.liveSessions.has(e.session),
        );
        expect((await store.lowerInflight(key, 2n ** 63n - 1n)).count, key).toBe(live.length);
      }
    },
    120_000,
  );

  it('two admissions of one request and lock go in separate batches, in call order', async () => {
    const store = f.store;
    const model = await setUp(store, 'dup');
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
    const model = await setUp(store, 'fail');
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
