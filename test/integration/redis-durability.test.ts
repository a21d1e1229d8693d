/**
 * openRedisStore's start-up checks: the AOF `appendfsync always` requirement (with its
 * managed-Redis fallback when CONFIG is unavailable), and failing fast on an unreachable
 * Redis. Private redis-server processes, except for the shared Redis refusal.
 */
import { once } from 'node:events';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { RedisDurabilityError } from '../../src/store/redis/durability.js';
import { openRedisStore } from '../../src/store/redis/store.js';
import { randomPrefix, SHARED_REDIS_URL } from '../helpers/redis-fixture.js';
import { dropRedisPrefix } from '../helpers/redis-seed.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

let server: RedisServer | null = null;
afterEach(async () => {
  await server?.stop();
  server = null;
});

const NS = { namespace: 'fgt_durability' };

describe('durability check', () => {
  it('refuses the shared Redis (no persistence) without the flag, saying why', async () => {
    const err = await openRedisStore(SHARED_REDIS_URL, NS).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RedisDurabilityError);
    const message = (err as Error).message;
    expect(message).toMatch(/appendonly is "no"/);
    expect(message).toContain('--allow-volatile-redis');
    expect(message).not.toContain('\n');
  });

  it('opens the shared Redis with allowVolatileRedis and says so in health', async () => {
    const ns = randomPrefix();
    const store = await openRedisStore(SHARED_REDIS_URL, { namespace: ns, allowVolatileRedis: true });
    try {
      expect((await store.health()).detail).toMatch(/volatile/);
    } finally {
      await store.close();
      await dropRedisPrefix(SHARED_REDIS_URL, ns);
    }
  });

  it('refuses appendfsync everysec', async () => {
    server = await startRedisServer(['--appendonly', 'yes', '--appendfsync', 'everysec']);
    await expect(openRedisStore(server.url, NS)).rejects.toThrow(/appendfsync is "everysec"/);
  });

  it('refuses an eviction policy that could evict fences', async () => {
    server = await startRedisServer([
      '--appendonly',
      'yes',
      '--appendfsync',
      'always',
      '--maxmemory-policy',
      'allkeys-lru',
    ]);
    await expect(openRedisStore(server.url, NS)).rejects.toThrow(/maxmemory-policy is "allkeys-lru"/);
  });

  it('accepts AOF with appendfsync always', async () => {
    server = await startRedisServer(['--appendonly', 'yes', '--appendfsync', 'always']);
    const store = await openRedisStore(server.url, NS);
    try {
      expect(await store.health()).toMatchObject({
        ok: true,
        detail: expect.stringMatching(/appendfsync always/),
      });
      expect((await store.tryAcquire({ key: 'k', owner: 'a', ttlMs: 1000 })).ok).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('falls back to INFO when CONFIG is disabled: AOF off is refused', async () => {
    server = await startRedisServer(['--rename-command', 'CONFIG', '']);
    await expect(openRedisStore(server.url, NS)).rejects.toThrow(
      /aof_enabled:0.*appendfsync could not be verified/,
    );
  });

  it('falls back to INFO when CONFIG is disabled: AOF on is accepted, unverified fsync noted', async () => {
    server = await startRedisServer(['--appendonly', 'yes', '--rename-command', 'CONFIG', '']);
    const store = await openRedisStore(server.url, NS);
    try {
      expect((await store.health()).detail).toMatch(/appendfsync could not be verified/);
    } finally {
      await store.close();
    }
  });
});

describe('unreachable Redis', () => {
  it('open() rejects fast with a one-line StoreUnavailableError', async () => {
    server = await startRedisServer();
    const url = server.url;
    await server.kill(); // the port is now closed
    const err = await openRedisStore(url, { ...NS, allowVolatileRedis: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect((err as Error).message).toMatch(
      /cannot connect to redis at redis:\/\/127\.0\.0\.1:\d+.*ECONNREFUSED/,
    );
    expect((err as Error).message).not.toContain('\n');
  });

  it('open() gives up within seconds when the socket never answers', async () => {
    // A non-routable address: the connection either times out or fails at once.
    const err = await openRedisStore('redis://10.255.255.1:6379', { ...NS, allowVolatileRedis: true }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect((err as Error).message).toMatch(/no (reply|answer) within \d+ ms|EHOSTUNREACH|ENETUNREACH/);
  }, 10_000);

  it('open() gives up within seconds when a server accepts but never answers', async () => {
    const sockets: Socket[] = [];
    const silent = createServer((s) => sockets.push(s)); // accepts connections, never replies
    silent.listen(0, '127.0.0.1');
    await once(silent, 'listening');
    const port = (silent.address() as AddressInfo).port;
    try {
      const err = await openRedisStore(`redis://127.0.0.1:${port}`, {
        ...NS,
        allowVolatileRedis: true,
      }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(StoreUnavailableError);
      // Given up by the open deadline, not by anything the silent server did.
      expect((err as Error).message).toMatch(/no (reply|answer) within \d+ ms/);
      expect((err as Error).message).not.toContain('\n');
    } finally {
      for (const s of sockets) s.destroy();
      silent.close();
    }
  }, 10_000);

  it('never prints the password of the URL', async () => {
    server = await startRedisServer();
    const url = `redis://:s3cret@127.0.0.1:${server.port}`;
    await server.kill();
    const err = await openRedisStore(url, { ...NS, allowVolatileRedis: true }).catch((e: unknown) => e);
    expect((err as Error).message).not.toContain('s3cret');
  });
});
