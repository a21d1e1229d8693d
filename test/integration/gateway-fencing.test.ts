import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/types.js';
import {
  mint,
  ordersPolicy,
  send as call,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from '../helpers/gateway-harness.js';
import { closeSharedStores, GATEWAY_STORES, type OpenedStore } from '../helpers/gateway-stores.js';

afterAll(closeSharedStores);

describe.each(GATEWAY_STORES)('gateway fencing on $name store', (factory) => {
  let opened: OpenedStore;
  let store: Store;
  let upstream: TestUpstream;
  let gw: TestGateway;

  beforeEach(async () => {
    opened = await factory.open();
    store = opened.store;
    upstream = await startUpstream();
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url) });
  });

  afterEach(async () => {
    await gw.close();
    await upstream.close();
    await opened.close();
  });

  it('forwards an admitted write with its Fencing-Token and records the fence', async () => {
    const lease = await mint(store, 'order:42');
    const res = await call(gw, 'PUT', '/orders/42?x=1', { 'fencing-token': String(lease.token) }, '{"a":1}');
    expect(res.status).toBe(200);
    expect(upstream.hits).toHaveLength(1);
    const hit = upstream.hits[0]!;
    expect(hit.url).toBe('/orders/42?x=1');
    expect(hit.headers['fencing-token']).toBe(String(lease.token));
    expect(hit.headers['x-fencegate-route']).toBe('order-writes');
    expect(hit.headers['x-fencegate-fence']).toBe('admitted');
    expect(hit.bytes).toBe(7);
    expect((await store.inspect('order:42'))?.highest).toBe(lease.token);
    const admitted = await gw.metrics.admittedWrites.get();
    expect(admitted.values.find((v) => v.labels.route === 'order-writes')?.value).toBe(1);
  });

  it('paused owner: 41 then 42 written, 41 refused 409 stale-token and never forwarded', async () => {
    const a = await mint(store, 'order:7');
    const b = await mint(store, 'order:7');
    expect(b.token > a.token).toBe(true);
    expect((await call(gw, 'PUT', '/orders/7', { 'fencing-token': String(b.token) }, 'b')).status).toBe(200);
    const stale = await call(gw, 'PUT', '/orders/7', { 'fencing-token': String(a.token) }, 'a');
    expect(stale.status).toBe(409);
    expect(stale.headers['content-type']).toContain('application/problem+json');
    expect(stale.body).toMatchObject({
      type: 'urn:fencegate:stale-token',
      status: 409,
      lock: 'order:7',
      token: String(a.token),
      highest: String(b.token),
    });
    expect(upstream.hits).toHaveLength(1);
    expect(upstream.hits[0]?.headers['fencing-token']).toBe(String(b.token));
    const [event] = gw.events.recent();
    expect(event).toMatchObject({
      route: 'order-writes',
      lock: 'order:7',
      reason: 'stale',
      enforced: true,
      method: 'PUT',
    });
    expect(event?.token).toBe(String(a.token));
    // Every fenced route's series exist from the start at 0: only the one that moved is 1.
    const fenced = await gw.metrics.fencedWrites.get();
    expect(fenced.values.filter((v) => v.value > 0)).toEqual([
      expect.objectContaining({
        value: 1,
        labels: { route: 'order-writes', reason: 'stale', enforced: 'true' },
      }),
    ]);
  });

  it('same-token concurrent writes are all admitted', async () => {
    const lease = await mint(store, 'order:9');
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        call(gw, 'PUT', '/orders/9', { 'fencing-token': String(lease.token) }, `w${i}`),
      ),
    );
    expect(results.map((r) => r.status)).toEqual(Array(8).fill(200));
    expect(upstream.hits).toHaveLength(8);
  });

  it('missing token → 428 token-required', async () => {
    const res = await call(gw, 'DELETE', '/orders/1');
    expect(res.status).toBe(428);
    expect(res.body).toMatchObject({ type: 'urn:fencegate:token-required', lock: 'order:1' });
    expect(upstream.hits).toHaveLength(0);
    expect(gw.events.recent()[0]).toMatchObject({ reason: 'missing', token: null });
  });

  it.each(['', '0', '-1', '+1', '007', '1.5', 'abc', '9223372036854775808', '1, 2'])(
    'malformed token %j → 400 token-malformed',
    async (value) => {
      await mint(store, 'order:1');
      const res = await call(gw, 'PUT', '/orders/1', { 'fencing-token': value });
      expect(res.status).toBe(400);
      expect(res.body.type).toBe('urn:fencegate:token-malformed');
      expect(upstream.hits).toHaveLength(0);
    },
  );

  it('a token never issued → 403 token-invalid and the fence does not move', async () => {
    const lease = await mint(store, 'order:5');
    const forged = lease.token + 1000n;
    const res = await call(gw, 'PUT', '/orders/5', { 'fencing-token': String(forged) });
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ type: 'urn:fencegate:token-invalid', token: String(forged) });
    expect((await store.inspect('order:5'))?.highest ?? null).toBeNull();
    const never = await call(gw, 'PUT', '/orders/never-locked', { 'fencing-token': '1' });
    expect(never.status).toBe(403);
    expect(upstream.hits).toHaveLength(0);
  });

  it('check: lease → 409 lease-expired once the lease is released, admitted while live', async () => {
    const lease = await mint(store, 'leased:1', { hold: true });
    expect((await call(gw, 'PUT', '/leased/1', { 'fencing-token': String(lease.token) })).status).toBe(200);
    await store.release('leased:1', lease.leaseId);
    const res = await call(gw, 'PUT', '/leased/1', { 'fencing-token': String(lease.token) });
    expect(res.status).toBe(409);
    expect(res.body.type).toBe('urn:fencegate:lease-expired');
    expect(upstream.hits).toHaveLength(1);
  });

  it('no matching route → 404 no-route, never forwarded', async () => {
    for (const [method, path] of [
      ['GET', '/elsewhere'],
      ['POST', '/orders'],
      ['OPTIONS', '/orders/1'],
      ['PROPFIND', '/orders/1'],
    ] as const) {
      const res = await call(gw, method, path);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.body.type).toBe('urn:fencegate:no-route');
    }
    expect(upstream.hits).toHaveLength(0);
  });

  it('unfenced routes forward as is', async () => {
    const res = await call(gw, 'GET', '/orders/1/items?page=2');
    expect(res.status).toBe(200);
    expect(upstream.hits[0]?.url).toBe('/orders/1/items?page=2');
    expect(upstream.hits[0]?.headers['x-fencegate-fence']).toBeUndefined();
  });

  it('a lock from a header: missing header → 400 invalid-key; present → fenced by that lock', async () => {
    const missing = await call(gw, 'PUT', '/tenants/items/3', { 'fencing-token': '1' });
    expect(missing.status).toBe(400);
    expect(missing.body.type).toBe('urn:fencegate:invalid-key');
    const lease = await mint(store, 'tenant:acme:3');
    const ok = await call(gw, 'PUT', '/tenants/items/3', {
      'fencing-token': String(lease.token),
      'x-tenant': 'acme',
    });
    expect(ok.status).toBe(200);
    expect((await store.inspect('tenant:acme:3'))?.highest).toBe(lease.token);
  });

  it('shadow mode: every write is judged against the shadow record and forwarded; would-be refusals are counted and recorded', async () => {
    const a = await mint(store, 'shadow:1');
    const b = await mint(store, 'shadow:1');
    expect((await call(gw, 'PUT', '/shadow/1', { 'fencing-token': String(b.token) })).status).toBe(200);
    // The takeover case shadow mode exists for: the older owner writes after the newer one.
    expect((await call(gw, 'PUT', '/shadow/1', { 'fencing-token': String(a.token) })).status).toBe(200);
    expect((await call(gw, 'PUT', '/shadow/1', {})).status).toBe(200);
    expect((await call(gw, 'PUT', '/shadow/1', { 'fencing-token': String(b.token + 99n) })).status).toBe(200);
    expect(upstream.hits).toHaveLength(4);
    expect(upstream.hits.map((h) => h.headers['x-fencegate-fence'])).toEqual([
      'shadow-admitted',
      'shadow-refused',
      'shadow-refused',
      'shadow-refused',
    ]);
    // The shadow record moved; the enforced fence did not.
    expect(await store.inspect('shadow:1')).toMatchObject({ highest: null, shadowHighest: b.token });
    const events = gw.events.recent().map((e) => [e.reason, e.enforced, e.token, e.highest]);
    expect(events).toEqual([
      ['forged', false, String(b.token + 99n), String(b.token)],
      ['missing', false, null, null],
      ['stale', false, String(a.token), String(b.token)],
    ]);
    const fenced = await gw.metrics.fencedWrites.get();
    const moved = fenced.values.filter((v) => v.value > 0);
    expect(moved.map((v) => v.labels)).toEqual([
      { route: 'shadow-writes', reason: 'stale', enforced: 'false' },
      { route: 'shadow-writes', reason: 'forged', enforced: 'false' },
      { route: 'shadow-writes', reason: 'missing', enforced: 'false' },
    ]);
  });

  it('an upstream URL with a path prefixes every forwarded path; a reload can move the upstream', async () => {
    const other = await startUpstream();
    try {
      await gw.setPolicy(ordersPolicy(`${other.url}/api/v1/`));
      expect((await call(gw, 'GET', '/orders/1?q=a%20b')).status).toBe(200);
      expect(other.hits.map((h) => h.url)).toEqual(['/api/v1/orders/1?q=a%20b']);
      expect(upstream.hits).toHaveLength(0);
    } finally {
      await other.close();
    }
  });

  it('a policy reload takes effect for the next request', async () => {
    expect((await call(gw, 'GET', '/other/1')).status).toBe(404);
    await gw.setPolicy(
      `${ordersPolicy(upstream.url)}  - name: other\n    methods: [GET]\n    path: /other/*\n    upstream: orders\n`,
    );
    expect((await call(gw, 'GET', '/other/1')).status).toBe(200);
  });
});
