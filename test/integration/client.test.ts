/**
 * The TypeScript client against a real control listener: renewal keeps a lease,
 * the AbortSignal fires (fail closed) when renewal fails, withLock releases.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { FencegateClient, LeaseLostError, LockHeldError, withFencingToken } from '../../src/client/index.js';
import { openRedisStore } from '../../src/store/redis/store.js';
import type { Store } from '../../src/store/types.js';
import { listenControl } from '../helpers/control.js';
import { startRedis, type RedisProcess } from '../helpers/procs.js';
import { answerViolations } from '../helpers/openapi.js';
import { sleep } from '../helpers/wait.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function serve(): Promise<{ url: string; redis: RedisProcess; store: Store }> {
  const redis = await startRedis();
  cleanups.push(() => redis.stop());
  const store = await openRedisStore(redis.url, { allowVolatileRedis: true, namespace: 'fgc' });
  cleanups.push(() => store.close());
  const c = await listenControl(store);
  cleanups.push(() => c.close());
  return { url: c.url, redis, store };
}

describe('client', () => {
  it('renews in the background so the lease outlives its TTL', async () => {
    const { url } = await serve();
    const fg = new FencegateClient({ url });
    // A TTL long enough that renewals still land in time on a loaded machine (the lock is
    // judged lost as soon as a renewal is late: fail closed), and a wait of several TTLs.
    const lock = await fg.acquire('job:1', { owner: 'w1', ttlMs: 1500 });
    await sleep(4000);
    expect(lock.lost).toBe(false);
    const status = await fg.inspect('job:1');
    expect(status).toMatchObject({ held: true, owner: 'w1', token: lock.fencingToken });
    await lock.release();
    expect((await fg.inspect('job:1'))?.held).toBe(false);
  });

  it('fires the AbortSignal before the TTL ends when renewal fails (store stopped)', async () => {
    const { url, redis } = await serve();
    const fg = new FencegateClient({ url, requestTimeoutMs: 300 });
    const ttlMs = 1500;
    const sentAt = Date.now();
    const lock = await fg.acquire('job:2', { owner: 'w1', ttlMs });
    await redis.kill(); // every renewal now fails with 503
    const firedAt = await new Promise<number>((resolve) =>
      lock.signal.addEventListener('abort', () => resolve(Date.now()), { once: true }),
    );
    expect(firedAt).toBeLessThan(sentAt + ttlMs);
    expect(lock.signal.reason).toBeInstanceOf(LeaseLostError);
    expect(() => lock.throwIfLost()).toThrow(LeaseLostError);
  });

  it('fires the AbortSignal at once when the lease is taken over', async () => {
    const { url } = await serve();
    const fg = new FencegateClient({ url });
    const lock = await fg.acquire('job:3', { owner: 'w1', ttlMs: 600, autoRenew: false, safetyMarginMs: 0 });
    await sleep(700);
    const other = await fg.acquire('job:3', { owner: 'w2', ttlMs: 5000 });
    await expect(lock.renew()).rejects.toBeInstanceOf(LeaseLostError);
    expect(lock.lost).toBe(true);
    expect(other.token).toBeGreaterThan(lock.token);
    await other.release();
  });

  it('withLock waits its turn, sends the token with lock.fetch, and always releases', async () => {
    const { url } = await serve();
    const seen: (string | undefined)[] = [];
    const upstream = createServer((req, res) => {
      seen.push(req.headers['fencing-token'] as string | undefined);
      res.end('ok');
    });
    upstream.listen(0, '127.0.0.1');
    await once(upstream, 'listening');
    cleanups.push(async () => upstream.close());
    const target = `http://127.0.0.1:${(upstream.address() as { port: number }).port}/orders/1`;

    const fg = new FencegateClient({ url });
    const first = await fg.acquire('job:4', { owner: 'a', ttlMs: 5000 });
    const waiting = fg.withLock('job:4', { owner: 'b', waitMs: 5000 }, async (lock) => {
      const res = await lock.fetch(target, { method: 'PUT', body: 'v' });
      expect(res.status).toBe(200);
      return lock.fencingToken;
    });
    setTimeout(() => void first.release(), 100);
    const token = await waiting;
    expect(BigInt(token)).toBeGreaterThan(first.token);
    expect(seen).toEqual([token]);
    expect((await fg.inspect('job:4'))?.held).toBe(false);
    expect(new Headers(withFencingToken({ method: 'PUT' }, 42n).headers).get('fencing-token')).toBe('42');
  });

  it('throws LockHeldError when the lock stays held', async () => {
    const { url } = await serve();
    const fg = new FencegateClient({ url });
    await fg.acquire('job:5', { owner: 'a', ttlMs: 5000 });
    await expect(fg.acquire('job:5', { owner: 'b', waitMs: 100 })).rejects.toBeInstanceOf(LockHeldError);
  });
});

describe('docs/openapi.json', () => {
  it('describes every answer this file got from the control API', () => {
    expect(answerViolations()).toEqual([]);
  });
});
