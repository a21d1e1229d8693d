/**
 * The client fails closed everywhere (docs/client.md): every wait is interruptible by the
 * caller's signal (queue wait, backoff, renew), the caller's signal reaches lock.signal
 * after the grant, and every failure is a typed error, with the store stopped (the issuer
 * answers 503), the issuer unreachable, the gateway refusing a stale token or unable to
 * judge, and a release that fails after the work.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  AbortedError,
  FencegateClient,
  FenceUnavailableError,
  LeaseLostError,
  Lock,
  LockHeldError,
  NetworkError,
  ReleaseError,
  StaleTokenError,
  StoreUnavailableError,
  TimeoutError,
} from '../../src/client/index.js';
import { openRedisStore } from '../../src/store/redis/store.js';
import type { Store } from '../../src/store/types.js';
import { listenControl } from '../helpers/control.js';
import { echo, ordersPolicy, startGateway, startUpstream } from '../helpers/gateway-harness.js';
import { startRedis, type RedisProcess } from '../helpers/procs.js';
import { STORE_FIXTURES } from '../helpers/stores.js';
import { sleep, waitUntil } from '../helpers/wait.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function control(store: Store): Promise<string> {
  const c = await listenControl(store);
  cleanups.push(() => c.close());
  return c.url;
}

/** An issuer on the embedded store (nothing to stop). */
async function embedded(): Promise<{ url: string; store: Store }> {
  const h = await STORE_FIXTURES.find((f) => f.name === 'embedded')!.open();
  cleanups.push(() => h.close());
  return { url: await control(h.store), store: h.store };
}

/** An issuer on a Redis of its own, to stop. */
async function onOwnRedis(): Promise<{ url: string; redis: RedisProcess }> {
  const redis = await startRedis();
  cleanups.push(() => redis.stop());
  const store = await openRedisStore(redis.url, { allowVolatileRedis: true, namespace: 'fgfc' });
  cleanups.push(() => store.close());
  return { url: await control(store), redis };
}

/** A server that accepts connections and never answers (a hung issuer). */
async function silent(): Promise<string> {
  const server: Server = createServer(() => undefined);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('client: every wait is interruptible', () => {
  it('the queue wait: aborting the caller’s signal ends the acquire with AbortedError, and the issuer stops waiting', async () => {
    const { url, store } = await embedded();
    const fg = new FencegateClient({ url });
    const holder = await fg.acquire('w:1', { owner: 'holder', ttlMs: 30_000 });
    const ctl = new AbortController();
    const waiting = fg.acquire('w:1', { owner: 'waiter', ttlMs: 5000, waitMs: 60_000, signal: ctl.signal });
    await waitUntil('queued', async () => ((await store.inspect('w:1'))?.waiters ?? 0) === 1);
    ctl.abort(new Error('shutting down'));
    const err = await waiting.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AbortedError);
    expect((err as AbortedError).cause).toEqual(new Error('shutting down'));
    await waitUntil('queue left', async () => ((await store.inspect('w:1'))?.waiters ?? 1) === 0);
    await holder.release();
  });

  it('the backoff between retries: an abort during it ends the acquire at once', async () => {
    let calls = 0;
    const ctl = new AbortController();
    const fetchImpl: typeof fetch = async () => {
      calls += 1;
      setTimeout(() => ctl.abort(new Error('stop')), 1); // aborted while it backs off
      throw new TypeError('fetch failed', { cause: new Error('ECONNREFUSED') });
    };
    const fg = new FencegateClient({ url: 'http://127.0.0.1:1', fetch: fetchImpl, acquireAttempts: 50 });
    const err = await fg.acquire('b:1', { owner: 'w', signal: ctl.signal }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AbortedError);
    expect(calls).toBeLessThan(50);
  });

  it('renew: a renewal that hangs is cut when the caller aborts (the lock ends, typed)', async () => {
    const hung = await silent();
    const ctl = new AbortController();
    const lease = {
      key: 'r:1',
      owner: 'w',
      leaseId: 'l-1',
      token: '7',
      expiresAt: new Date(Date.now() + 10_000).toISOString(),
      ttlMs: 10_000,
    };
    const lock = new Lock(hung, fetch, lease, performance.now(), {
      autoRenew: false,
      requestTimeoutMs: 60_000,
      signal: ctl.signal,
    });
    const pending = lock.renew().catch((e: unknown) => e);
    await sleep(50);
    ctl.abort(new Error('stop'));
    const err = await pending;
    expect(err).toBeInstanceOf(AbortedError);
    expect(lock.signal.reason).toBeInstanceOf(AbortedError);
  });
});

describe('client: the caller’s signal after the grant', () => {
  it('reaches lock.signal, and the lock is released', async () => {
    const { url, store } = await embedded();
    const fg = new FencegateClient({ url });
    const ctl = new AbortController();
    const lock = await fg.acquire('s:1', { owner: 'w', ttlMs: 30_000, signal: ctl.signal });
    expect(lock.signal.aborted).toBe(false);
    ctl.abort(new Error('user cancelled'));
    expect(lock.signal.aborted).toBe(true);
    expect(lock.signal.reason).toBeInstanceOf(AbortedError);
    expect((lock.signal.reason as AbortedError).cause).toEqual(new Error('user cancelled'));
    await expect(lock.fetch('http://127.0.0.1:1/x')).rejects.toBeInstanceOf(AbortedError);
    await waitUntil('released', async () => (await store.inspect('s:1'))?.held === false);
  });

  it('withLocks: the set’s signal fires with it too, and every key is released', async () => {
    const { url, store } = await embedded();
    const fg = new FencegateClient({ url });
    const ctl = new AbortController();
    const err = await fg
      .withLocks(['s:b', 's:a'], { owner: 'w', ttlMs: 30_000, signal: ctl.signal }, async (set) => {
        expect(set.keys).toEqual(['s:a', 's:b']);
        ctl.abort(new Error('cancel'));
        expect(set.lock('s:a').signal.aborted).toBe(true);
        set.throwIfLost();
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AbortedError);
    expect((await store.inspect('s:a'))?.held).toBe(false);
    expect((await store.inspect('s:b'))?.held).toBe(false);
  });
});

describe('client: typed errors', () => {
  it('an issuer that cannot be reached: NetworkError with the platform error as cause', async () => {
    const fg = new FencegateClient({ url: 'http://127.0.0.1:1', acquireAttempts: 2 });
    const err = await fg.acquire('n:1', { owner: 'w' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NetworkError);
    expect((err as NetworkError).cause).toBeInstanceOf(TypeError);
    await expect(fg.inspect('n:1')).rejects.toBeInstanceOf(NetworkError);
  });

  it('an issuer that does not answer: TimeoutError', async () => {
    const fg = new FencegateClient({ url: await silent(), requestTimeoutMs: 200, acquireAttempts: 1 });
    await expect(fg.acquire('t:1', { owner: 'w' })).rejects.toBeInstanceOf(TimeoutError);
    await expect(fg.inspect('t:1')).rejects.toBeInstanceOf(TimeoutError);
  });

  it('the store stopped: acquire, renew and a release after the work are typed (StoreUnavailableError, ReleaseError)', async () => {
    const { url, redis } = await onOwnRedis();
    const fg = new FencegateClient({ url, acquireAttempts: 2 });
    const lock = await fg.acquire('d:1', { owner: 'w', ttlMs: 30_000, autoRenew: false });
    const err = await fg
      .withLock('d:2', { owner: 'w', ttlMs: 30_000 }, async () => {
        await redis.stop();
        return 'done';
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReleaseError);
    expect((err as ReleaseError).value).toBe('done');
    expect((err as ReleaseError).cause).toBeInstanceOf(StoreUnavailableError);
    await expect(lock.renew()).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(lock.lost).toBe(false); // a failed renewal is not a lost lease: the deadline decides
    const acq = await fg.acquire('d:3', { owner: 'w' }).catch((e: unknown) => e);
    expect(acq).toBeInstanceOf(StoreUnavailableError);
    expect((acq as StoreUnavailableError).status).toBe(503);
  });

  it('withLock: a lease no longer held at release is a ReleaseError (cause LeaseLostError)', async () => {
    const { url, store } = await embedded();
    const fg = new FencegateClient({ url });
    const err = await fg
      .withLock('x:1', { owner: 'w', ttlMs: 30_000, autoRenew: false }, async (lock) => {
        await store.release('x:1', lock.leaseId); // as if it lapsed and was taken over meanwhile
        return 42;
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReleaseError);
    expect((err as ReleaseError).value).toBe(42);
    expect((err as ReleaseError).cause).toBeInstanceOf(LeaseLostError);
  });

  it('LockHeldError names the lock; LockStatus carries issued and highest', async () => {
    const { url } = await embedded();
    const fg = new FencegateClient({ url });
    const lock = await fg.acquire('h:1', { owner: 'a' });
    const err = await fg.acquire('h:1', { owner: 'b' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LockHeldError);
    expect((err as LockHeldError).lock).toBe('h:1');
    expect((err as LockHeldError).retryAfterMs).toBeGreaterThan(0);
    expect(await fg.inspect('h:1')).toMatchObject({
      held: true,
      token: lock.fencingToken,
      issued: lock.fencingToken,
      highest: null,
      shadowHighest: null,
    });
    await lock.release();
  });

  it('await using releases the lock when the block ends', async () => {
    const { url, store } = await embedded();
    const fg = new FencegateClient({ url });
    {
      await using lock = await fg.acquire('u:1', { owner: 'w' });
      expect((await store.inspect('u:1'))?.held).toBe(true);
      expect(lock.lost).toBe(false);
    }
    expect((await store.inspect('u:1'))?.held).toBe(false);
    {
      await using set = await fg.acquireMany(['u:2', 'u:3'], { owner: 'w' });
      expect(set.lost).toBe(false);
    }
    expect((await store.inspect('u:3'))?.held).toBe(false);
  });
});

describe('client: the gateway refusing', () => {
  it('lock.fetch: a stale token is a StaleTokenError with token and highest, and the lock ends', async () => {
    const h = await STORE_FIXTURES.find((f) => f.name === 'embedded')!.open();
    cleanups.push(() => h.close());
    const url = await control(h.store);
    const upstream = await startUpstream(echo);
    cleanups.push(() => upstream.close());
    const gw = await startGateway({ store: h.store, policy: ordersPolicy(upstream.url) });
    cleanups.push(() => gw.close());
    const fg = new FencegateClient({ url });
    // A holder that still believes in its lease (paused, say) after the lease ended: its
    // Lock is live by its own clock, the issuer has granted the key again meanwhile.
    const granted = await h.store.tryAcquire({ key: 'order:9', owner: 'old', ttlMs: 30_000 });
    if (!granted.ok) throw new Error('expected a grant');
    await h.store.release('order:9', granted.lease.leaseId);
    const info = { ...granted.lease, token: String(granted.lease.token), expiresAt: '' };
    const old = new Lock(url, fetch, info, performance.now(), { autoRenew: false, requestTimeoutMs: 5000 });
    const next = await fg.acquire('order:9', { owner: 'new', ttlMs: 30_000 });
    expect((await next.fetch(`${gw.url}/orders/9`, { method: 'PUT', body: 'new' })).status).toBe(200);
    const err = await old
      .fetch(`${gw.url}/orders/9`, { method: 'PUT', body: 'old' })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StaleTokenError);
    expect((err as StaleTokenError).token).toBe(old.token);
    expect((err as StaleTokenError).highest).toBe(next.token);
    expect(old.signal.reason).toBe(err);
    expect(upstream.hits.map((x) => x.method)).toEqual(['PUT']); // the stale write never arrived
    await next.release();
  });

  it('lock.fetch: a gateway whose store is down is a FenceUnavailableError (not forwarded)', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.stop());
    const store = await openRedisStore(redis.url, { allowVolatileRedis: true, namespace: 'fgfu' });
    cleanups.push(() => store.close());
    const url = await control(store);
    const upstream = await startUpstream(echo);
    cleanups.push(() => upstream.close());
    const gw = await startGateway({ store, policy: ordersPolicy(upstream.url) });
    cleanups.push(() => gw.close());
    const fg = new FencegateClient({ url });
    const lock = await fg.acquire('order:5', { owner: 'w', ttlMs: 30_000 });
    await redis.stop();
    const err = await lock.fetch(`${gw.url}/orders/5`, { method: 'PUT', body: 'x' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FenceUnavailableError);
    expect((err as FenceUnavailableError).status).toBe(503);
    expect(lock.lost).toBe(false); // the lock is not lost for that: retry later
    expect(upstream.hits).toEqual([]);
  });
});
