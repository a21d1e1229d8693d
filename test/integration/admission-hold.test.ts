/**
 * Admission holds through the gateway, on every store (docs/adr/0016-admission-holds.md):
 * one store admission serves a holder's next writes with the same token; its entry counts
 * at the drain barrier until the hold closes and its last write is over, so a higher
 * token, from this gateway or another, goes only after every held write was answered.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { faultyStore, type FaultyStore } from '../helpers/faulty-store.js';
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
import { sleep, waitUntil } from '../helpers/wait.js';

afterAll(closeSharedStores);

const until = (check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> =>
  waitUntil('condition', check, { timeoutMs: ms, everyMs: 5, message: 'condition not reached' });

const put = (gw: TestGateway, path: string, token: bigint) =>
  send(gw, 'PUT', path, { 'fencing-token': String(token) }, 'x');

async function inflight(store: FaultyStore, lock: string): Promise<number> {
  return (await store.lowerInflight(lock, 1n << 62n)).count;
}

/** Entries made by writes (not by a hold's renewal in the background). */
const writeEntries = (store: FaultyStore) => store.entries.filter((id) => !id.startsWith('hold-'));

async function held(gw: TestGateway): Promise<number> {
  const m = await gw.metrics.heldAdmissions.get();
  return m.values.find((v) => v.labels.route === 'order-writes')?.value ?? 0;
}

describe.each(GATEWAY_STORES)('admission holds on the $name store', (factory) => {
  let opened: OpenedStore;
  let store: FaultyStore;
  let upstream: TestUpstream;
  let gw: TestGateway;
  const gateways: TestGateway[] = [];

  /** A gateway on the test's store; a long hold (1 s, the most allowed) so no step races its end. */
  async function gateway(admissionHoldMs = 1000): Promise<TestGateway> {
    const g = await startGateway({ store, policy: ordersPolicy(upstream.url), admissionHoldMs });
    gateways.push(g);
    return g;
  }

  beforeEach(async () => {
    opened = await factory.open();
    store = faultyStore(opened.store);
    upstream = await startUpstream();
    gw = await gateway();
  });

  afterEach(async () => {
    for (const g of gateways.splice(0)) await g.close();
    await upstream.close();
    await opened.close();
  });

  it("one admission serves the holder's next writes; its entry is finished once, when the hold closes", async () => {
    const a = await mint(store, 'order:1');
    for (let i = 0; i < 10; i++) expect((await put(gw, '/orders/1', a.token)).status).toBe(200);
    expect(upstream.hits).toHaveLength(10);
    expect(writeEntries(store)).toHaveLength(1);
    expect(await held(gw)).toBe(9);
    expect(await inflight(store, 'order:1')).toBeGreaterThan(0); // the hold's entry still counts
    await until(async () => (await inflight(store, 'order:1')) === 0);
    await store.entriesFinished();
    expect([...store.finishes.keys()].sort()).toEqual([...store.entries].sort());
    expect([...store.finishes.values()].every((n) => n === 1)).toBe(true);
  });

  it("another gateway's higher token waits for the hold; the holder's writes are applied before it", async () => {
    const other = await gateway();
    const a = await mint(store, 'order:2');
    expect((await put(gw, '/orders/2', a.token)).status).toBe(200);
    const b = await mint(store, 'order:2');
    const newer = put(other, '/orders/2', b.token);
    // b is admitted (the fence is at b now) and waits at the barrier behind the hold.
    await until(() => store.calls.includes('lowerInflight') || store.calls.includes('watch'));
    expect((await put(gw, '/orders/2', a.token)).status).toBe(200); // joins the hold
    expect((await newer).status).toBe(200);
    const tokens = upstream.hits.map((h) => h.headers['fencing-token']);
    expect(tokens).toEqual([String(a.token), String(a.token), String(b.token)]);
    const [, lastA, hitB] = upstream.hits;
    expect(hitB!.receivedAt).toBeGreaterThanOrEqual(lastA!.answeredAt!);
    // The hold is over: the old token is stale everywhere.
    expect((await put(gw, '/orders/2', a.token)).status).toBe(409);
    expect(upstream.hits).toHaveLength(3);
  });

  it('a higher token on the holding gateway closes its hold at once', async () => {
    const a = await mint(store, 'order:3');
    expect((await put(gw, '/orders/3', a.token)).status).toBe(200);
    const b = await mint(store, 'order:3');
    expect((await put(gw, '/orders/3', b.token)).status).toBe(200);
    // a's entry was finished when b came, not at the end of a's hold.
    expect(store.finishes.get(store.entries[0]!)).toBe(1);
    expect((await put(gw, '/orders/3', a.token)).status).toBe(409);
    expect((await put(gw, '/orders/3', b.token)).status).toBe(200);
    expect(writeEntries(store)).toHaveLength(2);
  });

  it('a lock written to steadily keeps a hold: renewed in the background, each entry finished once', async () => {
    const quick = await gateway(40);
    const a = await mint(store, 'order:5');
    const writes = 40;
    for (let i = 0; i < writes; i++) {
      expect((await put(quick, '/orders/5', a.token)).status).toBe(200);
      await sleep(5);
    }
    // Longer than several holds: renewals kept one open; writes after the first asked the store
    // only when a renewal had not come back in time.
    expect(store.entries.some((id) => id.startsWith('hold-'))).toBe(true);
    expect(writeEntries(store).length).toBeLessThan(writes);
    expect(await held(quick)).toBe(writes - writeEntries(store).length);
    await until(async () => (await inflight(store, 'order:5')) === 0);
    await store.entriesFinished();
    expect([...store.finishes.keys()].sort()).toEqual([...store.entries].sort());
    expect([...store.finishes.values()].every((n) => n === 1)).toBe(true);
  });

  it('a lease route asks the store for every write', async () => {
    const lease = await mint(store, 'leased:1', { hold: true });
    for (let i = 0; i < 3; i++) expect((await put(gw, '/leased/1', lease.token)).status).toBe(200);
    expect(store.entries).toHaveLength(3);
    await until(() => store.finishes.size === 3);
  });

  it('with --admission-hold-ms 0 every write asks the store and is finished when it is over', async () => {
    const off = await gateway(0);
    const a = await mint(store, 'order:4');
    for (let i = 0; i < 3; i++) expect((await put(off, '/orders/4', a.token)).status).toBe(200);
    expect(store.entries).toHaveLength(3);
    await until(() => store.finishes.size === 3);
    expect(await held(off)).toBe(0);
  });
});
