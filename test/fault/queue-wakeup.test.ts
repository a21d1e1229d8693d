/**
 * The issuer's queue wakes on every expiry, with real processes on every store.
 *
 * Dead-holder chain: H takes a 10 s lease and never releases it; five waiters, each its
 * own process on the built client SDK (waitMs 15–35 s, TTL 1 s, no renewal), queue one
 * after the other and are each killed with SIGKILL the moment they are granted, so each
 * grant ends only by expiry. Every waiter must be granted in FIFO order, and shortly
 * after the previous lease expired: the gap is measured on the store's clock, from the
 * previous lease's expiresAt to the next lease's start (its expiresAt − ttlMs), both as
 * the issuer answered them, so no two machines' clocks are compared. Before the fix a
 * waiter behind the head slept until the head's whole wait deadline (11–36 s).
 *
 * Dead issuer (shared stores): an issuer with three queued waiters is killed with
 * SIGKILL; their queue entries carry short deadlines that only a live issuer renews, so
 * through a second issuer the free lock is refused only briefly, with wording that says
 * the lock is free and waiters are queued ahead, and is then granted.
 */
import { randomBytes } from 'node:crypto';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { FencegateProcess } from '../helpers/procs.js';
import { startChildClient, useFaultSite, type ChildClient, type StoreKind } from './harness/index.js';
import { waitUntil } from '../helpers/wait.js';

const KINDS: StoreKind[] = ['redis', 'postgres', 'embedded'];
/** The promise: a waiter is granted within this long of the lease ahead of it expiring. */
const WAKE_BOUND_MS = 1500;

interface LeaseJson {
  leaseId: string;
  owner: string;
  token: string;
  expiresAt: string;
  ttlMs: number;
}

async function post(base: string, path: string, body: unknown) {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

async function inspect(base: string, lock: string): Promise<{ held: boolean; waiters: number }> {
  const res = await fetch(`${base}/v1/locks/${encodeURIComponent(lock)}`, {
    signal: AbortSignal.timeout(5000),
  });
  if (res.status === 404) return { held: false, waiters: 0 };
  return (await res.json()) as { held: boolean; waiters: number };
}

const until = (cond: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> =>
  waitUntil(what, cond, { timeoutMs, everyMs: 25 });

describe.each(KINDS)('queue wake-up (%s store)', (kind) => {
  const site = useFaultSite();
  let server: FencegateProcess | null = null;
  let second: FencegateProcess | null = null;
  const children: ChildClient[] = [];

  beforeAll(async () => {
    await site.openStore(kind);
    site.usePolicy('test/fixtures/empty-policy.yaml');
    server = await site.serve();
  }, 120_000);

  afterEach(async () => {
    for (const c of children.splice(0)) await c.kill();
    await second?.kill();
    second = null;
  });

  it('grants each waiter of a dead-holder chain in FIFO order, right after each expiry', async () => {
    const control = (server as FencegateProcess).control;
    const tag = randomBytes(3).toString('hex');
    const lock = `chain:${tag}`;
    // H's lease outlasts queueing the five waiters (each a new process: slow on a loaded box).
    const h = await post(control, `/v1/locks/${encodeURIComponent(lock)}/acquire`, {
      owner: 'H',
      ttlMs: 10_000,
    });
    expect(h.status).toBe(200);
    const holder = h.json as unknown as LeaseJson;

    const owners = ['w1', 'w2', 'w3', 'w4', 'w5'];
    for (const [i, owner] of owners.entries()) {
      const child = startChildClient('chain-waiter.mjs', {
        control,
        lock,
        owner,
        ttlMs: 1000,
        waitMs: 25_000 + 5000 * i,
      });
      children.push(child);
      // Queue them one after the other, so FIFO order is the order of the owners.
      await until(async () => (await inspect(control, lock)).waiters === i + 1, `${owner} queued`);
    }

    const grants: LeaseJson[] = [];
    const grantOrder: string[] = [];
    const pending = new Set(children);
    while (pending.size > 0) {
      await Promise.race(
        [...pending].map(async (c) => {
          await c.next('grant', 60_000).catch(() => undefined);
        }),
      );
      for (const c of [...pending]) {
        const refused = c.events.find((e) => e.event === 'refused');
        if (refused) throw new Error(`a waiter was refused: ${String(refused.error)}`);
        const g = c.events.find((e) => e.event === 'grant');
        if (!g) continue;
        await c.kill(); // dies holding the lock: only its expiry frees it
        pending.delete(c);
        const lease = g.lease as LeaseJson;
        grants.push(lease);
        grantOrder.push(lease.owner);
      }
    }

    expect(grantOrder).toEqual(owners);
    const gaps: number[] = [];
    let prev = holder;
    for (const g of grants) {
      const start = Date.parse(g.expiresAt) - g.ttlMs;
      gaps.push(start - Date.parse(prev.expiresAt));
      expect(BigInt(g.token)).toBe(BigInt(prev.token) + 1n);
      prev = g;
    }
    console.log(
      `${kind}: grant delay after the previous lease expired (ms, store clock): ${gaps.join(', ')}`,
    );
    for (const gap of gaps) {
      // Granted only after the expiry (nothing else freed the lock), and soon after it.
      expect(gap).toBeGreaterThanOrEqual(0);
      expect(gap).toBeLessThanOrEqual(WAKE_BOUND_MS);
    }
  }, 120_000);

  // A second issuer process on the same store (for the embedded store: the same directory).
  it('an issuer killed with queued waiters stops blocking the lock within seconds', async () => {
    const control = (server as FencegateProcess).control;
    second = await site.serve();
    const tag = randomBytes(3).toString('hex');
    const lock = `deadissuer:${tag}`;
    const path = `/v1/locks/${encodeURIComponent(lock)}/acquire`;
    const h = await post(control, path, { owner: 'H', ttlMs: 1000 });
    expect(h.status).toBe(200);
    const waiting = [0, 1, 2].map((i) =>
      post(second!.control, path, { owner: `q${i}`, ttlMs: 1000, waitMs: 60_000 }).catch(() => null),
    );
    await until(async () => (await inspect(control, lock)).waiters === 3, 'three waiters queued');
    await second.kill('SIGKILL');
    await Promise.all(waiting);

    // While the dead issuer's entries still count, the refusal says what is happening.
    await until(async () => !(await inspect(control, lock)).held, 'the holder lease expired');
    const now = await post(control, path, { owner: 'late', ttlMs: 1000 });
    if (now.status === 409) {
      expect(now.json).toMatchObject({ type: 'urn:fencegate:lock-held', blockedBy: 'queue' });
      expect(String(now.json.detail)).toContain('free');
    }
    // And the lock is granted once those entries lapse: seconds, not the 60 s waitMs.
    const started = Date.now();
    const next = await post(control, path, { owner: 'next', ttlMs: 1000, waitMs: 20_000 });
    expect(next.status).toBe(200);
    expect(Date.now() - started).toBeLessThan(10_000);
  }, 60_000);
});
