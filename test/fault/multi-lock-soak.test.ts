/**
 * Multi-lock acquire under load, on every store: 8 clients (the TypeScript client over
 * HTTP, withLocks) take random overlapping sets of 2–4 of 6 keys for FENCEGATE_SOAK_MS
 * (10 s here; scripts/multi-lock-soak.sh runs 30 s and prints the figures). No deadlock:
 * every acquire completes or times out (LockHeldError) and every client finishes; no key
 * is ever held by two clients at once; the tokens of each key strictly increase in grant
 * order; afterwards nothing is held. And a holder killed with kill -9 frees all its keys
 * once their TTL passes, with nothing released.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FencegateClient, LockHeldError } from '../../src/client/index.js';
import { listenControl, type ListeningControl } from '../helpers/control.js';
import { STORE_FIXTURES, type Harness } from '../helpers/stores.js';
import { sleep } from '../helpers/wait.js';
import { startChildClient, type ChildClient } from './harness/index.js';

const SOAK_MS = Number(process.env.FENCEGATE_SOAK_MS ?? 10_000);
const CLIENTS = 8;
const KEYS = ['acct:0', 'acct:1', 'acct:2', 'acct:3', 'acct:4', 'acct:5'];

function pick(n: number): string[] {
  const pool = [...KEYS];
  const out: string[] = [];
  while (out.length < n) out.push(pool.splice(Math.floor(Math.random() * pool.length), 1)[0] as string);
  return out; // random order: the issuer sorts
}

describe.each(STORE_FIXTURES)('multi-lock soak on $name', (fixture) => {
  let h: Harness;
  let control: ListeningControl;
  let url: string;
  const children: ChildClient[] = [];
  beforeEach(async () => {
    h = await fixture.open();
    control = await listenControl(h.store);
    url = control.url;
  });
  afterEach(async () => {
    for (const c of children.splice(0)) await c.kill().catch(() => undefined);
    await control.close();
    await h.close();
  });

  it(
    `${CLIENTS} clients on overlapping sets of 2–4 keys: no deadlock, no key held twice, tokens increase`,
    async () => {
      const holders = new Map<string, number>();
      const tokens = new Map<string, bigint[]>(KEYS.map((k) => [k, []]));
      const violations: string[] = [];
      const counts = { granted: 0, timedOut: 0, keysGranted: 0 };
      const end = performance.now() + SOAK_MS;
      const client = async (c: number) => {
        const fg = new FencegateClient({ url, requestTimeoutMs: 10_000 });
        while (performance.now() < end) {
          const keys = pick(2 + Math.floor(Math.random() * 3));
          try {
            await fg.withLocks(keys, { owner: `client-${c}`, ttlMs: 10_000, waitMs: 1000 }, async (set) => {
              for (const l of set.locks) {
                const other = holders.get(l.key);
                if (other !== undefined) violations.push(`${l.key} granted to ${c} while ${other} held it`);
                holders.set(l.key, c);
                tokens.get(l.key)?.push(l.token);
              }
              counts.granted += 1;
              counts.keysGranted += set.locks.length;
              await sleep(Math.floor(Math.random() * 5));
              for (const l of set.locks) holders.delete(l.key);
            });
          } catch (err) {
            if (!(err instanceof LockHeldError)) throw err;
            counts.timedOut += 1;
          }
        }
      };
      // A deadlock would keep some client waiting forever: each acquire is bounded by waitMs,
      // so every client must be done soon after the soak ends.
      const done = Promise.all(Array.from({ length: CLIENTS }, (_, c) => client(c)));
      const stuck = sleep(SOAK_MS + 60_000).then(() => 'stuck' as const);
      expect(await Promise.race([done.then(() => 'done' as const), stuck])).toBe('done');
      expect(violations).toEqual([]);
      for (const [key, list] of tokens) {
        for (let i = 1; i < list.length; i++) {
          if (!((list[i] as bigint) > (list[i - 1] as bigint)))
            throw new Error(`${key}: ${list[i]} after ${list[i - 1]}`);
        }
      }
      for (const key of KEYS) expect((await h.store.inspect(key))?.held ?? false).toBe(false);
      expect(counts.granted).toBeGreaterThan(0);
      console.log(
        JSON.stringify({
          store: fixture.name,
          seconds: SOAK_MS / 1000,
          clients: CLIENTS,
          acquires: counts.granted + counts.timedOut,
          granted: counts.granted,
          timedOut: counts.timedOut,
          keysGranted: counts.keysGranted,
          grantsPerSecond: Math.round(counts.granted / (SOAK_MS / 1000)),
          violations: violations.length,
        }),
      );
    },
    SOAK_MS + 120_000,
  );

  it('a timeout leaves nothing held; a holder killed with kill -9 frees all its keys after the TTL', async () => {
    const ttlMs = 3000;
    const child = startChildClient('multi-holder.mjs', {
      control: url,
      keys: ['k:c', 'k:a', 'k:b'],
      owner: 'doomed',
      ttlMs,
    });
    children.push(child);
    const grant = await child.next('grant');
    const fg = new FencegateClient({ url });
    // Held: a set overlapping it times out, and leaves its free key unheld.
    const refused = await fg
      .acquireMany(['k:0', 'k:b'], { owner: 'other', waitMs: 200 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LockHeldError);
    expect((refused as LockHeldError).lock).toBe('k:b');
    expect((await h.store.inspect('k:0'))?.held).toBe(false);
    await child.kill();
    // Nothing released them: the dead holder's lease is still there until its TTL passes.
    expect(await h.store.inspect('k:a')).toMatchObject({
      held: true,
      owner: 'doomed',
      leaseId: grant['leaseId'],
    });
    const after = await fg.acquireMany(['k:a', 'k:b', 'k:c'], { owner: 'next', ttlMs: 5000, waitMs: 20_000 });
    const before = grant['tokens'] as Record<string, string>;
    for (const l of after.locks) expect(l.token).toBeGreaterThan(BigInt(before[l.key] as string));
    for (const key of ['k:a', 'k:b', 'k:c']) {
      const s = await h.store.inspect(key);
      expect(s).toMatchObject({ held: true, owner: 'next', leaseId: after.leaseId });
    }
    await after.release();
  }, 60_000);
});
