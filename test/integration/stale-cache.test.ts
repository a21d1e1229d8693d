/**
 * The stale-write cache (src/gateway/stale-cache.ts) against real stores: whatever the
 * interleaving of grants, admitted, stale and forged tokens, shadow and lease checks and
 * epoch bumps, on a few locks and two gateways (two caches) sharing one store, the
 * gateway's verdict (Judge.verdict(), cache first) is the store's own verdict at that moment:
 * the cache never refuses a token the store would admit, and never lets through one it
 * would refuse. And once a gateway knows the highest token, a flood of stale writes
 * costs the store nothing.
 */
import fc from 'fast-check';
import type { IncomingMessage } from 'node:http';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { CompiledRoute, FencingSettings } from '../../src/policy/index.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { AdmissionHolds } from '../../src/gateway/admission-hold.js';
import { SessionLease } from '../../src/gateway/session.js';
import { StaleCache } from '../../src/gateway/stale-cache.js';
import { StoreGuard } from '../../src/gateway/store-guard.js';
import { Judge, StaleRefusals } from '../../src/gateway/verdict.js';
import type { AdmitCheck, AdmitResult, Store } from '../../src/store/types.js';
import {
  mint,
  ordersPolicy,
  send,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from '../helpers/gateway-harness.js';
import { closeSharedStores, GATEWAY_STORES, type OpenedStore } from '../helpers/gateway-stores.js';
import { loadRoutes } from '../helpers/policy-routes.js';
import { sleep } from '../helpers/wait.js';

afterAll(closeSharedStores);

const LOCKS = 3;
const quiet = { warn: () => undefined };
// The cache alone: every write asks the store (holds are tested in admission-hold tests).
const noHolds = new AdmissionHolds(0);
const propLease = new SessionLease('prop-session');
propLease.validUntil = Infinity;

type Op =
  | { op: 'grant'; lock: number; hold: boolean }
  | { op: 'bump' }
  | {
      op: 'write';
      gateway: number;
      lock: number;
      /** Index into the lock's granted tokens (from the newest), or past them: a forged token. */
      pick: number;
      forged: boolean;
      check: AdmitCheck;
      record: boolean;
    };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.record({ op: fc.constant('grant' as const), lock: fc.nat(LOCKS - 1), hold: fc.boolean() }),
  },
  { weight: 1, arbitrary: fc.constant({ op: 'bump' as const }) },
  {
    weight: 12,
    arbitrary: fc.record({
      op: fc.constant('write' as const),
      gateway: fc.nat(1),
      lock: fc.nat(LOCKS - 1),
      pick: fc.nat(6),
      forged: fc.constantFrom(false, false, false, true),
      check: fc.constantFrom<AdmitCheck>('token', 'token', 'lease'),
      record: fc.constantFrom(true, true, true, false),
    }),
  },
);

function headers(token: bigint): IncomingMessage {
  return { rawHeaders: ['Fencing-Token', token.toString(10)] } as unknown as IncomingMessage;
}

const verdictOf = (r: AdmitResult) => (r.ok ? 'ok' : r.reason);

describe.each(GATEWAY_STORES)('stale-write cache on the $name store', (factory) => {
  let opened: OpenedStore;
  let store: Store;
  let route: CompiledRoute & { fencing: FencingSettings };

  beforeAll(async () => {
    opened = await factory.open();
    store = opened.store;
    const loaded = await loadRoutes([
      '  - name: w',
      '    methods: [PUT]',
      '    path: /w/:id',
      '    upstream: up',
      '    lock: "w:{id}"',
    ]);
    if (!loaded.result.ok) throw new Error(loaded.errors.join('\n'));
    const r = loaded.result.policy.routes[0];
    if (r === undefined || r.fencing === null) throw new Error('no fenced route');
    route = { ...r, fencing: r.fencing };
  });

  afterAll(async () => {
    await opened.close();
  });

  it('gives the store its own verdict, whatever the interleaving (property)', async () => {
    let run = 0;
    let cachedRefusals = 0;
    let storeStale = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 20, maxLength: 80 }), async (ops) => {
        run += 1;
        const name = (i: number) => `cache-prop-${run}-${Math.random().toString(36).slice(2, 8)}:${i}`;
        const locks = Array.from({ length: LOCKS }, (_, i) => name(i));
        const granted: bigint[][] = locks.map(() => []);
        const held: (string | null)[] = locks.map(() => null);
        const caches = [new StaleCache(), new StaleCache()];
        // Each gateway's kept refusals (a small capacity, so that locks are also forgotten).
        const refusals = [new StaleRefusals(2), new StaleRefusals(2)];
        const guard = new StoreGuard(store, createMetrics({ defaultMetrics: false }), quiet);
        // Each gateway's judge, with its own cache and kept refusals.
        const judges = [0, 1].map(
          (g) =>
            new Judge({
              guard,
              sequencers: null,
              cache: caches[g]!,
              shadowCache: new StaleCache(),
              holds: noHolds,
              refusals: refusals[g]!,
            }),
        );
        let requests = 0;
        try {
          for (const o of ops) {
            if (o.op === 'grant') {
              // A held lease (live for `check: lease`) would block the next grant: released first.
              const previous = held[o.lock];
              if (previous !== null && previous !== undefined) await store.release(locks[o.lock]!, previous);
              const lease = await mint(store, locks[o.lock]!, { hold: o.hold, ttlMs: 60_000 });
              granted[o.lock]!.push(lease.token);
              held[o.lock] = o.hold ? lease.leaseId : null;
              continue;
            }
            if (o.op === 'bump') {
              await store.bumpEpoch();
              continue;
            }
            const lock = locks[o.lock]!;
            const tokens = granted[o.lock]!;
            const newest = tokens[tokens.length - 1] ?? 0n;
            const token =
              o.forged || tokens.length === 0
                ? newest + 1n + BigInt(o.pick)
                : tokens[Math.max(0, tokens.length - 1 - o.pick)]!;
            if (token < 1n) continue;
            const requestId = `r${run}-${requests++}`;
            // The store's verdict now, judged without recording anything.
            const reference = await store.admit({
              lock,
              token,
              check: o.check,
              requestId: `${requestId}-judge`,
              session: 'judge',
              record: false,
            });
            const cache = caches[o.gateway]!;
            const fromCache = cache.refuses(lock, token) !== null;
            const decided = judges[o.gateway]!.verdict(
              {
                route: { ...route, fencing: { ...route.fencing, check: o.check } },
                record: o.record,
                deliveryBoundMs: 0,
                raw: headers(token),
                request: { id: requestId },
                lease: propLease,
              },
              lock,
            );
            // Refused from the cache at once: no promise, no store call, no microtask.
            if (fromCache) expect(decided).not.toBeInstanceOf(Promise);
            const verdict = await decided;
            if (fromCache) {
              cachedRefusals += 1;
              // Refused from the cache: the store refuses it as stale too.
              expect(verdict.ok).toBe(false);
              expect(verdictOf(reference)).toBe('stale');
            }
            if (verdictOf(reference) === 'stale') storeStale += 1;
            expect(verdict.ok ? 'ok' : verdict.reason).toBe(
              reference.ok
                ? 'ok'
                : { stale: 'stale', forged: 'forged', 'lease-expired': 'lease' }[reference.reason],
            );
            if (verdict.ok && o.record) await store.finish(lock, requestId);
          }
        } finally {
          guard.shutdown();
        }
      }),
      { numRuns: factory.name === 'memory' ? 150 : 40, seed: 1301, endOnFailure: true },
    );
    // Not vacuous: the cache answered for a good share of the stale writes.
    expect(cachedRefusals).toBeGreaterThan(storeStale / 4);
  }, 180_000);
});

describe.each(GATEWAY_STORES.filter((f) => f.name === 'redis' || f.name === 'embedded'))(
  'a stale flood through the gateway ($name store)',
  (factory) => {
    let opened: OpenedStore;
    let upstream: TestUpstream;
    let gw: TestGateway;
    const calls = { admit: 0, finish: 0 };

    beforeEach(async () => {
      calls.admit = 0;
      calls.finish = 0;
      opened = await factory.open();
      const inner = opened.store;
      // The store as the gateway sees it, counting the fence calls.
      const counted = new Proxy(inner, {
        get(target, prop) {
          const value: unknown = Reflect.get(target, prop, target);
          if (typeof value !== 'function') return value;
          const fn = value as (...args: unknown[]) => unknown;
          if (prop !== 'admit' && prop !== 'finish') return fn.bind(target);
          return (...args: unknown[]) => {
            calls[prop] += 1;
            return fn.apply(target, args);
          };
        },
      });
      upstream = await startUpstream();
      gw = await startGateway({ store: counted, policy: ordersPolicy(upstream.url) });
    });

    afterEach(async () => {
      await gw.close();
      await upstream.close();
      await opened.close();
    });

    it('refuses a stale flood without a store call, answering and recording each refusal', async () => {
      const a = await mint(opened.store, 'order:flood');
      const b = await mint(opened.store, 'order:flood');
      const put = (t: bigint) => send(gw, 'PUT', '/orders/flood', { 'fencing-token': String(t) }, 'x');
      expect((await put(b.token)).status).toBe(200);
      // The admission of b taught the gateway its highest: from here the cache answers.
      const first = await put(a.token);
      expect(first.status).toBe(409);
      // The same answer a refusal by the store gives (test/integration/gateway-fencing.test.ts).
      expect(first.body).toMatchObject({
        type: 'urn:fencegate:stale-token',
        status: 409,
        lock: 'order:flood',
        token: String(a.token),
        highest: String(b.token),
      });
      // b's entry is finished once its admission hold closes (docs/adr/0016-admission-holds.md).
      const start = Date.now();
      while (calls.finish < calls.admit && Date.now() - start < 5000) await sleep(5);
      expect(calls).toEqual({ admit: 1, finish: 1 });
      const before = { ...calls };
      const N = 200;
      for (let i = 0; i < N; i++) {
        const res = await put(a.token);
        expect(res.status).toBe(409);
        expect(res.headers['content-type']).toContain('application/problem+json');
        expect(res.body).toEqual(first.body);
      }
      expect(calls).toEqual(before);
      expect(upstream.hits).toHaveLength(1);
      // Still counted and recorded like a refusal the store made.
      const fenced = await gw.metrics.fencedWrites.get();
      const stale = fenced.values.find(
        (v) => v.labels.route === 'order-writes' && v.labels.reason === 'stale',
      );
      expect(stale?.value).toBe(N + 1);
      const events = gw.events.recent().filter((e) => e.lock === 'order:flood');
      expect(events.length).toBeGreaterThanOrEqual(Math.min(N + 1, 100));
      expect(events.every((e) => e.reason === 'stale' && e.token === String(a.token))).toBe(true);
      // The current token, and a newer one, still go to the store and are admitted.
      expect((await put(b.token)).status).toBe(200);
      const c = await mint(opened.store, 'order:flood');
      expect((await put(c.token)).status).toBe(200);
      expect(calls.admit).toBe(before.admit + 2);
      // b is now stale, and the cache learned that from c's admission: no store call.
      expect((await put(b.token)).status).toBe(409);
      expect(calls.admit).toBe(before.admit + 2);
    });
  },
);
