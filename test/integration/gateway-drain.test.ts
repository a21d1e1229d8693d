import { request } from 'undici';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { faultyStore, type FaultyStore } from '../helpers/faulty-store.js';
import {
  mint,
  ordersPolicy,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
  type UpstreamHandler,
} from '../helpers/gateway-harness.js';
import { closeSharedStores, GATEWAY_STORES, type OpenedStore } from '../helpers/gateway-stores.js';
import { sleep, waitUntil } from '../helpers/wait.js';

afterAll(closeSharedStores);

/** Echo, after ?delay=N ms. */
const slow: UpstreamHandler = async (req, res) => {
  const delay = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('delay') ?? 0);
  if (delay > 0) await sleep(delay);
  res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
};

async function put(gw: TestGateway, path: string, token: bigint, signal?: AbortSignal) {
  const res = await request(`${gw.url}${path}`, {
    method: 'PUT',
    headers: { 'fencing-token': String(token) },
    body: 'x',
    signal,
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, at: Date.now() };
}

const until = (check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> =>
  waitUntil('condition', check, { timeoutMs: ms, everyMs: 5, message: 'condition not reached' });

async function inflight(store: FaultyStore, lock: string, below = 1n << 62n): Promise<number> {
  return (await store.lowerInflight(lock, below)).count;
}

describe.each(GATEWAY_STORES)('drain barrier on $name store', (factory) => {
  let opened: OpenedStore;
  let store: FaultyStore;
  let upstream: TestUpstream;
  let gw: TestGateway;

  beforeEach(async () => {
    opened = await factory.open();
    store = faultyStore(opened.store);
    upstream = await startUpstream(slow);
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url) });
  });

  afterEach(async () => {
    await gw.close();
    await upstream.close();
    await opened.close();
  });

  it('a higher token waits for the lower-token write in flight, then goes', async () => {
    const a = await mint(store, 'order:1');
    const b = await mint(store, 'order:1');
    const first = put(gw, '/orders/1?delay=400', a.token);
    await until(() => upstream.hits.length === 1);
    const second = await put(gw, '/orders/1', b.token);
    const firstDone = await first;
    expect(firstDone.status).toBe(200);
    expect(second.status).toBe(200);
    const [hitA, hitB] = upstream.hits;
    expect(hitB?.headers['fencing-token']).toBe(String(b.token));
    // B reached the upstream only after A's answer: it did not overtake it.
    expect(hitB!.receivedAt).toBeGreaterThanOrEqual(hitA!.answeredAt!);
    const drain = await gw.metrics.drainWaitSeconds.get();
    expect(
      drain.values.find((v) => v.metricName?.endsWith('_count') && v.labels.outcome === 'cleared')?.value,
    ).toBe(1);
    // A write with A's token is now stale.
    expect((await put(gw, '/orders/1', a.token)).status).toBe(409);
  });

  it('gives up with 503 fence-unavailable after drainTimeoutMs, not forwarded, its entry finished', async () => {
    await gw.setPolicy(ordersPolicy(upstream.url, { drainTimeoutMs: 150 }));
    const a = await mint(store, 'order:2');
    const b = await mint(store, 'order:2');
    const first = put(gw, '/orders/2?delay=800', a.token);
    await until(() => upstream.hits.length === 1);
    const second = await put(gw, '/orders/2', b.token);
    expect(second.status).toBe(503);
    expect(second.headers['retry-after']).toBe('1');
    expect(JSON.parse(second.text)).toMatchObject({
      type: 'urn:fencegate:fence-unavailable',
      lock: 'order:2',
      detail: expect.stringMatching(/still in flight after 150 ms/),
    });
    const waits = await gw.metrics.drainWaitSeconds.get();
    expect(waits.values.some((v) => v.labels.outcome === 'timeout' && v.value > 0)).toBe(true);
    const timeouts = await gw.metrics.drainTimeouts.get();
    expect(timeouts.values.find((v) => v.labels.route === 'order-writes')?.value).toBe(1);
    expect(upstream.hits).toHaveLength(1);
    expect(gw.events.recent()[0]).toMatchObject({
      type: 'drain-timeout',
      reason: 'drain-timeout',
      lock: 'order:2',
      token: String(b.token),
      enforced: true,
    });
    expect((await first).status).toBe(200);
    await until(async () => (await inflight(store, 'order:2')) === 0);
    expect([...store.finishes.values()]).toEqual([1, 1]);
  });

  it('the in-flight entry outlives a client that gave up while the upstream still works', async () => {
    const a = await mint(store, 'order:3');
    const abort = new AbortController();
    const first = put(gw, '/orders/3?delay=400', a.token, abort.signal).catch((e: Error) => e);
    await until(() => upstream.hits.length === 1);
    abort.abort();
    expect(await first).toBeInstanceOf(Error);
    await sleep(100);
    // The upstream may still apply A: a higher token must keep waiting for it.
    expect(await inflight(store, 'order:3')).toBe(1);
    await until(() => upstream.hits[0]?.answeredAt != null);
    await until(async () => (await inflight(store, 'order:3')) === 0);
    expect([...store.finishes.values()]).toEqual([1]);
  });

  it('a client that gives up at the drain barrier is finished at once and not forwarded', async () => {
    const a = await mint(store, 'order:4');
    const b = await mint(store, 'order:4');
    const first = put(gw, '/orders/4?delay=600', a.token);
    await until(() => upstream.hits.length === 1);
    const abort = new AbortController();
    const second = put(gw, '/orders/4', b.token, abort.signal).catch((e: Error) => e);
    await until(() => store.calls.includes('lowerInflight'));
    abort.abort();
    expect(await second).toBeInstanceOf(Error);
    await until(() => store.finishes.size === 1);
    // finishes counts the call as it starts; the store's delete lands a moment later (slow CI).
    await until(async () => (await inflight(store, 'order:4')) <= 1);
    expect(await inflight(store, 'order:4')).toBe(1); // only A's remains
    expect((await first).status).toBe(200);
    expect(upstream.hits).toHaveLength(1);
    await until(async () => (await inflight(store, 'order:4')) === 0);
    expect([...store.finishes.values()]).toEqual([1, 1]);
  });

  it('a write the upstream dropped unanswered keeps counting for its lock-delay: a higher token waits for it', async () => {
    // The upstream may still apply a request it had whole and never answered (it closed the
    // connection): its entry is finished only its bound (the upstream's timeoutMs) after it was sent.
    await gw.close();
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url, { timeoutMs: 2000 }) });
    const a = await mint(store, 'order:6');
    const b = await mint(store, 'order:6');
    upstream.handler = (_req, res) => {
      upstream.handler = slow;
      res.destroy();
    };
    expect((await put(gw, '/orders/6', a.token)).status).toBe(502);
    const entryA = store.entries[0]!;
    expect(store.finishes.has(entryA)).toBe(false); // still counting after the 502
    const second = await put(gw, '/orders/6', b.token);
    expect(second.status).toBe(200);
    const [hitA, hitB] = upstream.hits;
    expect(hitB?.headers['fencing-token']).toBe(String(b.token));
    // B waited at the barrier until A's entry was finished, and reached the upstream only then.
    expect(store.calls).toContain('lowerInflight');
    expect(hitB!.receivedAt).toBeGreaterThanOrEqual(store.finishedAt.get(entryA)!);
    expect(store.finishedAt.get(entryA)!).toBeGreaterThan(hitA!.receivedAt);
  });

  it('finishes every admitted write exactly once: answered, upstream error, refused', async () => {
    // A short upstream bound: the write the upstream drops unanswered counts for its lock-delay.
    await gw.close();
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url, { timeoutMs: 400 }) });
    const a = await mint(store, 'order:5');
    await Promise.all([1, 2, 3].map(() => put(gw, '/orders/5', a.token)));
    upstream.handler = (_req, res) => void res.destroy();
    expect((await put(gw, '/orders/5', a.token)).status).toBe(502);
    upstream.handler = slow;
    expect((await put(gw, '/orders/5', a.token + 1000n)).status).toBe(403);
    await until(async () => (await inflight(store, 'order:5')) === 0);
    // Writes of one token may share an entry (an admission hold): every entry made is
    // finished, exactly once, and nothing else is.
    await store.entriesFinished();
    expect([...store.finishes.keys()].sort()).toEqual([...store.entries].sort());
    expect([...store.finishes.values()].every((n) => n === 1)).toBe(true);
  });
});
