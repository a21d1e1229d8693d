/**
 * Key layout: every key of one lock carries the same hash tag (so Redis Cluster puts them
 * in one slot), whatever braces the lock key contains; the tag decodes back to the key.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { decodeTag, encodeTag, lockKeyOf, lockKeys } from '../../src/store/redis/keys.js';
import { namespaceProblem } from '../../src/store/namespace.js';
import { openRedisStore } from '../../src/store/redis/store.js';
import { openTestRedisStore, SHARED_REDIS_URL, type OpenedRedisStore } from '../helpers/redis-fixture.js';
import { redisKeysUnder } from '../helpers/redis-seed.js';

/** The part of a key Redis Cluster hashes: the first `{…}` with something inside, else all of it. */
function hashTag(key: string): string {
  const open = key.indexOf('{');
  if (open < 0) return key;
  const close = key.indexOf('}', open + 1);
  if (close < 0 || close === open + 1) return key;
  return key.slice(open + 1, close);
}

const AWKWARD = [
  '{',
  '}',
  '{}',
  '}{',
  'a}b{c',
  '{order:42}',
  '%7B',
  '%',
  '%25',
  'ключ:{日本}',
  'x'.repeat(256),
];

describe('hash tags', () => {
  it('encode braces away and decode back', () => {
    for (const key of AWKWARD) {
      const tag = encodeTag(key);
      expect(tag).not.toMatch(/[{}]/);
      expect(decodeTag(tag)).toBe(key);
    }
    expect(encodeTag('order:42')).toBe('order:42'); // readable for operators
    expect(new Set(AWKWARD.map(encodeTag)).size).toBe(AWKWARD.length); // no collisions
  });

  it('give every key of a lock the same tag', () => {
    for (const key of AWKWARD) {
      const k = lockKeys('fg', key);
      const all = [k.ctr, k.lease, k.fence, k.inf, k.waitq, k.waitdl, k.channel, k.req('o', '{r}')];
      for (const redisKey of all) expect(hashTag(redisKey)).toBe(encodeTag(key));
      expect(lockKeyOf('fg', k.lease)).toBe(key);
      expect(lockKeyOf('fg', k.waitq)).toBe(key);
      expect(lockKeyOf('fg', k.ctr)).toBeNull();
    }
  });

  it('refuse namespaces that would break the tag or the SCAN pattern (one rule for every store)', () => {
    expect(namespaceProblem('fg')).toBeNull();
    expect(namespaceProblem('fencegate')).toBeNull();
    expect(namespaceProblem('fg_test-1')).toBeNull();
    for (const bad of ['', 'a{b', 'a}b', 'a*', 'a?', 'a[b', 'a b', 'a:b', 'a.b', 'pg_x', 'x'.repeat(54)]) {
      expect(namespaceProblem(bad), bad).not.toBeNull();
    }
  });
});

describe('awkward keys on a real Redis', () => {
  let t: OpenedRedisStore;
  beforeEach(async () => {
    t = await openTestRedisStore();
  });
  afterEach(async () => {
    await t.close();
  });

  it('keeps locks with braces apart and in one slot each', async () => {
    const tokens = new Map<string, bigint>();
    for (const key of AWKWARD) {
      const r = await t.store.tryAcquire({ key, owner: `o:${key}`, ttlMs: 10_000 });
      if (!r.ok) throw new Error(`no grant for ${key}`);
      tokens.set(key, r.lease.token);
      expect(
        await t.store.admit({
          lock: key,
          token: r.lease.token,
          check: 'lease',
          requestId: 'r',
          session: 's',
          record: true,
        }),
      ).toMatchObject({ ok: true });
    }
    for (const key of AWKWARD) {
      expect(await t.store.inspect(key)).toMatchObject({
        key,
        held: true,
        owner: `o:${key}`,
        token: tokens.get(key),
      });
    }
    const listed = (await t.store.listLocks({ limit: 100, prefix: '', after: null })).locks;
    expect(listed.map((l) => l.key).sort()).toEqual([...AWKWARD].sort());
    // every stored key has a non-empty tag that decodes to one of the locks
    for (const redisKey of await redisKeysUnder(t.url, t.prefix)) {
      if (redisKey === `${t.prefix}:epoch`) continue;
      expect(AWKWARD).toContain(decodeTag(hashTag(redisKey)));
    }
  });

  it('rejects a bad namespace before connecting', async () => {
    await expect(
      openRedisStore(SHARED_REDIS_URL, { namespace: 'a{b}', allowVolatileRedis: true }),
    ).rejects.toThrow(RangeError);
  });
});
