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
import { sleep, until } from '../helpers/wait.js';

afterAll(closeSharedStores);

/** A request with a small body unless it is a GET. */
const call = (gw: TestGateway, method: string, path: string, headers: Record<string, string> = {}) =>
  send(gw, method, path, headers, method === 'GET' ? undefined : 'x');

describe.each(GATEWAY_STORES)('store failures on $name store', (factory) => {
  let opened: OpenedStore;
  let store: FaultyStore;
  let upstream: TestUpstream;
  let gw: TestGateway;

  beforeEach(async () => {
    opened = await factory.open();
    store = faultyStore(opened.store);
    upstream = await startUpstream();
    gw = await startGateway({
      store,
      policy: ordersPolicy(upstream.url),
      storeBreaker: { timeoutMs: 300, resetTimeoutMs: 400, volumeThreshold: 3, errorThresholdPercentage: 50 },
    });
  });

  afterEach(async () => {
    store.down = false;
    store.delayMs = 0;
    await gw.close();
    await upstream.close();
    await opened.close();
  });

  it('store down: fenced writes get 503 fence-unavailable with Retry-After, reads keep flowing', async () => {
    const lease = await mint(store, 'order:1');
    store.down = true;
    for (let i = 0; i < 6; i++) {
      const res = await call(gw, 'PUT', '/orders/1', { 'fencing-token': String(lease.token) });
      expect(res.status).toBe(503);
      expect(res.body).toMatchObject({ type: 'urn:fencegate:fence-unavailable', lock: 'order:1' });
      expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    }
    expect(upstream.hits).toHaveLength(0);
    expect((await call(gw, 'GET', '/orders/1')).status).toBe(200);
    expect(upstream.hits).toHaveLength(1);
    // The breaker opened: later refusals do not even reach the store.
    const callsBefore = store.calls.length;
    expect((await call(gw, 'PUT', '/orders/1', { 'fencing-token': String(lease.token) })).status).toBe(503);
    expect(store.calls.length).toBe(callsBefore);
    // Every admit the store failed is counted (calls the open breaker refused never reached it).
    const errors = await gw.metrics.storeErrors.get();
    const admitsTried = store.calls.filter((c) => c === 'admit').length;
    expect(admitsTried).toBeGreaterThanOrEqual(1);
    expect(errors.values.find((v) => v.labels.op === 'admit')?.value).toBe(admitsTried);
    const breaker = await gw.metrics.breakerState.get();
    const storeStates = breaker.values.filter((v) => v.labels.breaker === 'store');
    expect(storeStates.find((v) => v.value === 1)?.labels.state).toBe('open');
    expect(gw.events.recent()[0]).toMatchObject({ reason: 'unavailable', lock: 'order:1', enforced: true });
    // Recovery once the breaker lets a trial call through.
    store.down = false;
    await sleep(450);
    expect((await call(gw, 'PUT', '/orders/1', { 'fencing-token': String(lease.token) })).status).toBe(200);
  });

  it('a store slower than the breaker timeout → 503 fast; an admission that lands late is finished', async () => {
    const lease = await mint(store, 'order:2');
    store.delayMs = 700;
    const res = await call(gw, 'PUT', '/orders/2', { 'fencing-token': String(lease.token) });
    // Answered by the breaker's timeout while the store was still working on it.
    expect(res.status).toBe(503);
    expect(res.body.detail).toMatch(/did not answer admit in time/);
    expect(store.finishes.size).toBe(0);
    expect(upstream.hits).toHaveLength(0);
    store.delayMs = 0;
    // Finished once its late answer arrived (on a loaded machine, later than the 700 ms).
    const inflight = async () => (await store.lowerInflight('order:2', 1n << 62n)).count;
    expect(await until(async () => (await inflight()) === 0 && store.finishes.size > 0, 15_000)).toBe(true);
    expect([...store.finishes.values()]).toEqual([1]);
  });

  it('shadow routes forward even when the store is down, counting the refusal', async () => {
    await mint(store, 'shadow:1');
    store.down = true;
    const res = await call(gw, 'PUT', '/shadow/1', { 'fencing-token': '1' });
    expect(res.status).toBe(200);
    expect(upstream.hits[0]?.headers['x-fencegate-fence']).toBe('shadow-refused');
    expect(gw.events.recent()[0]).toMatchObject({ reason: 'unavailable', enforced: false });
  });
});

describe.each(GATEWAY_STORES)('upstream failures on $name store', (factory) => {
  let opened: OpenedStore;
  let store: FaultyStore;
  let upstream: TestUpstream;
  let gw: TestGateway;

  beforeEach(async () => {
    opened = await factory.open();
    store = faultyStore(opened.store);
    upstream = await startUpstream();
  });

  afterEach(async () => {
    await gw.close();
    await upstream.close();
    await opened.close();
  });

  it('connection refused → 502 upstream-unavailable; the write is finished', async () => {
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url) });
    await upstream.close();
    const lease = await mint(store, 'order:1');
    const res = await call(gw, 'PUT', '/orders/1', { 'fencing-token': String(lease.token) });
    expect(res.status).toBe(502);
    expect(res.body).toMatchObject({ type: 'urn:fencegate:upstream-unavailable', upstream: 'orders' });
    expect((await call(gw, 'GET', '/orders/1')).status).toBe(502);
    await store.entriesFinished();
    expect([...store.finishes.values()]).toEqual([1]);
    const seconds = await gw.metrics.upstreamRequestSeconds.get();
    expect(seconds.values.some((v) => v.labels.status_class === 'error')).toBe(true);
  });

  it('no answer within timeoutMs → 504 upstream-timeout', async () => {
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url, { timeoutMs: 200 }) });
    upstream.handler = () => undefined; // never answers
    const lease = await mint(store, 'order:2');
    const res = await call(gw, 'PUT', '/orders/2', { 'fencing-token': String(lease.token) });
    expect(res.status).toBe(504);
    expect(res.body.type).toBe('urn:fencegate:upstream-timeout');
    await store.entriesFinished();
    expect([...store.finishes.values()]).toEqual([1]);
  });

  it('the upstream circuit opens after failures: 502 with Retry-After, without trying the upstream', async () => {
    const policy = ordersPolicy(upstream.url).replace(
      'breaker: { volumeThreshold: 1000 }',
      'breaker: { volumeThreshold: 2, errorThresholdPercentage: 50, resetTimeoutMs: 5000 }',
    );
    gw = await startGateway({ store, policy });
    upstream.handler = (_req, res) => void res.destroy();
    expect((await call(gw, 'GET', '/orders/1')).status).toBe(502);
    // A write with a body (read completely before the upstream failed) counts too.
    expect((await call(gw, 'PUT', '/shadow/1')).status).toBe(502);
    const hits = upstream.hits.length;
    const open = await call(gw, 'GET', '/orders/1');
    expect(open.status).toBe(502);
    expect(String(open.body.detail)).toContain('circuit breaker is open');
    expect(Number(open.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(upstream.hits.length).toBe(hits);
    const states = (await gw.metrics.breakerState.get()).values.filter((v) => v.labels.breaker === 'orders');
    expect(states.map((v) => [v.labels.state, v.value])).toEqual([
      ['closed', 0],
      ['half_open', 0],
      ['open', 1],
    ]);
  });

  it('upstream 5xx answers pass through and do not open the circuit', async () => {
    const policy = ordersPolicy(upstream.url).replace(
      'breaker: { volumeThreshold: 1000 }',
      'breaker: { volumeThreshold: 1 }',
    );
    gw = await startGateway({ store, policy });
    upstream.handler = (_req, res) => void res.writeHead(500, { 'content-type': 'text/plain' }).end('boom');
    for (let i = 0; i < 4; i++) expect((await call(gw, 'GET', '/orders/1')).status).toBe(500);
    expect(upstream.hits).toHaveLength(4);
  });
});
