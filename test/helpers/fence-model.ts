/**
 * A model of the fence rules, one call at a time, and seeded rounds of concurrent calls
 * checked against it: the batching stores (Postgres fence_batch_v1, Redis
 * fg_fence_batch_v1) must answer every call of a batch as if the calls ran one after
 * another in call order.
 */
import { expect } from 'vitest';
import type { AdmitRequest, AdmitResult, Store } from '../../src/store/types.js';

export interface ModelRules {
  /**
   * Whether entries of an ended gateway session count as in flight at admission. The SQL
   * stores drop them when the session ends; Redis drops them lazily (the gateway asks
   * lowerInflight and then dropInflight), so its admission still counts them.
   */
  endedSessionsCount: boolean;
}

/** mulberry32: a small seeded PRNG, so a failing seed can be replayed. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface LockModel {
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

export interface Entry {
  lock: string;
  requestId: string;
  token: bigint;
  session: string;
}

/** The rules of docs/stores-sql.md, one call at a time. */
export class Model {
  readonly entries = new Map<string, Entry>();
  constructor(
    readonly locks: Map<string, LockModel>,
    readonly liveSessions: Set<string>,
    readonly rules: ModelRules,
  ) {}

  /** Whether an entry counts at an admission's barrier. */
  counts(e: Entry): boolean {
    return this.rules.endedSessionsCount || this.liveSessions.has(e.session);
  }

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
      if (e.lock === req.lock && e.token < req.token && this.counts(e)) lower += 1;
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
export async function setUp(store: Store, prefix: string, rules: ModelRules): Promise<Model> {
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
  return new Model(locks, new Set([`${prefix}-live`]), rules);
}

/** A new owner takes a live lock: a new token, so the fence has further to climb. */
export async function regrant(store: Store, l: LockModel): Promise<void> {
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

export const pick = <T>(r: () => number, xs: readonly T[]): T => {
  const x = xs[Math.floor(r() * xs.length)];
  if (x === undefined) throw new Error('pick from an empty list');
  return x;
};

/** 25 rounds: finishes of some entries in flight and 1–12 admissions, all called in one turn. */
export async function concurrentRounds(store: Store, seed: number, rules: ModelRules): Promise<void> {
  const r = rng(seed);
  const prefix = `batch${seed}`;
  const model = await setUp(store, prefix, rules);
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
    const live = [...model.entries.values()].filter((e) => e.lock === key && model.counts(e));
    expect((await store.lowerInflight(key, 2n ** 63n - 1n)).count, key).toBe(live.length);
  }
}
