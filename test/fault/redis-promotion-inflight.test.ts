/**
 * A Redis replica promoted behind a stable endpoint brings back the in-flight entries it
 * had replicated, also of writes that finished on the old primary after the replica's last
 * sync. The gateway session that owned such an entry goes on (its record was replicated
 * too, and its beats reach the new primary), so nothing would ever finish the entry again:
 * it would hold the drain barrier of its lock for the whole life of that session (as
 * restored entries did on Postgres, fixed in the same way). The store forgets the entries
 * at or below the new epoch floor when it finds the promotion (fg_inflight_forget_v1);
 * entries admitted after it are kept.
 */
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { openRedisStore } from '../../src/store/redis/store.js';
import type { Store } from '../../src/store/types.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { waitUntil } from '../helpers/wait.js';
import { startTcpProxy } from './lib/tcp-proxy.js';

const AOF_ALWAYS = ['--appendonly', 'yes', '--appendfsync', 'always'];

describe('redis: a promoted replica', () => {
  it('forgets the in-flight entries it brought back, and keeps those admitted after', async () => {
    const defer: (() => Promise<unknown>)[] = [];
    try {
      const primary = await startRedisServer(AOF_ALWAYS);
      defer.push(() => primary.stop());
      const replica = await startRedisServer([
        ...AOF_ALWAYS,
        '--replicaof',
        '127.0.0.1',
        String(primary.port),
      ]);
      defer.push(() => replica.stop());
      const proxy = await startTcpProxy(primary.port);
      defer.push(() => proxy.close());
      const store: Store = await openRedisStore(proxy.url('redis'), { namespace: 'fgp' });
      defer.push(() => store.close());

      await store.openSession('s', 600_000);
      const a = await store.tryAcquire({ key: 'k', owner: 'a', ttlMs: 1000 });
      if (!a.ok) throw new Error('expected a grant');
      const w = { lock: 'k', check: 'token' as const, record: true as const, session: 's' };
      expect(await store.admit({ ...w, token: a.lease.token, requestId: 'w1' })).toMatchObject({ ok: true });

      // The replica has the entry, then stops following; the write finishes on the primary.
      const r = new Redis(replica.url, { lazyConnect: true });
      await r.connect();
      defer.push(async () => r.disconnect());
      await waitUntil('the replica has the entry', async () => (await r.hlen('fgp:{k}:inf')) === 1, {
        timeoutMs: 10_000,
      });
      await r.replicaof('NO', 'ONE');
      await store.finish('k', 'w1');
      expect((await store.lowerInflight('k', a.lease.token + 1n)).count).toBe(0);

      // The primary dies; the endpoint leads to the promoted replica.
      await primary.kill();
      proxy.switchTo(replica.port);
      let b: Awaited<ReturnType<Store['tryAcquire']>> | null = null;
      await waitUntil(
        'a grant on the promoted replica',
        async () => {
          b = await store.tryAcquire({ key: 'k', owner: 'b', ttlMs: 60_000 }).catch(() => null);
          return b !== null;
        },
        { timeoutMs: 20_000, everyMs: 100 },
      );
      const next = b as Awaited<ReturnType<Store['tryAcquire']>> | null;
      if (next === null || !next.ok) throw new Error(`expected a grant: ${JSON.stringify(next)}`);
      expect(next.lease.token).toBeGreaterThan(a.lease.token);
      // The session goes on, and the finished write's entry does not hold the barrier.
      expect(await store.beatSession('s')).toMatchObject({ alive: true });
      expect(await store.lowerInflight('k', next.lease.token)).toMatchObject({ count: 0 });

      // An entry admitted after the promotion counts as before.
      expect(await store.admit({ ...w, token: next.lease.token, requestId: 'w2' })).toMatchObject({
        ok: true,
      });
      expect(await store.lowerInflight('k', next.lease.token + 1n)).toMatchObject({ count: 1 });
    } finally {
      while (defer.length > 0)
        await defer
          .pop()?.()
          .catch(() => undefined);
    }
  }, 60_000);
});
