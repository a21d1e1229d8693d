/**
 * Memory under churn: many distinct keys acquired and released, then what the store and
 * the process keep, measured against the bounds documented in docs/stores-redis.md,
 * docs/stores-sql.md and docs/issuer.md ("Memory under churn").
 *
 * - Redis (a private redis-server, so INFO memory sees nothing else): 100k keys through
 *   the issuer; after release each key keeps its token counter (forever) and a small
 *   idempotency record (10 min). The growth per key must stay under REDIS_BYTES_PER_KEY.
 *   The issuer's hold-time bookkeeping stays bounded while 20k grants are never released.
 * - Postgres and embedded: fewer keys (each grant is a transaction with several
 *   statements); exactly one `locks` row and at most one `grants` row per key are left.
 *   Then the idempotency cleanup: a backlog of expired records (as left by a burst of
 *   distinct-key acquires ten minutes earlier) is gone while acquires go on at full speed
 *   on distinct keys, so the table stays bounded by the records still within their
 *   retention. Before, a process deleted at most 500 rows per 30 s.
 */
import { rm } from 'node:fs/promises';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { Issuer, MAX_TRACKED_GRANTS } from '../../src/issuer/service.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { openRedisStore } from '../../src/store/redis/store.js';
import { openEmbeddedStore, openPostgresStore } from '../../src/store/sql/store.js';
import type { Store } from '../../src/store/types.js';
import { freshEmbeddedDir } from '../helpers/embedded-template.js';
import { startRedis, type RedisProcess } from '../helpers/procs.js';
import { dropPostgresSchema, POSTGRES_URL, uniqueName } from '../helpers/stores.js';

/** Documented bound: Redis memory growth per released key, while its idempotency record lives. */
const REDIS_BYTES_PER_KEY = 450;

async function parallel(n: number, concurrency: number, fn: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) await fn(next++);
    }),
  );
}

async function churn(issuer: Issuer, prefix: string, n: number, concurrency: number): Promise<void> {
  await parallel(n, concurrency, async (i) => {
    const key = `${prefix}:${i}`;
    const r = await issuer.acquire({ key, owner: 'churn', ttlMs: 60_000, waitMs: 0, requestId: `r${i}` });
    if (!r.ok) throw new Error(`no grant for ${key}: ${JSON.stringify(r)}`);
    const rel = await issuer.release(key, r.lease.leaseId);
    if (!rel.ok) throw new Error(`release of ${key} refused`);
  });
}

describe('memory under churn: redis', () => {
  let redis: RedisProcess | null = null;
  let store: Store | null = null;
  afterAll(async () => {
    await store?.close();
    await redis?.stop();
    if (redis) await rm(redis.dir, { recursive: true, force: true });
  });

  it('100k distinct keys: bounded bytes per key in Redis, bounded bookkeeping in the issuer', async () => {
    redis = await startRedis();
    store = await openRedisStore(redis.url, { allowVolatileRedis: true });
    const admin = new Redis(redis.url);
    try {
      const used = async () => Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
      const issuer = new Issuer(store, createMetrics({ defaultMetrics: false }));
      await churn(issuer, 'warm', 1000, 64); // scripts loaded, connections warm
      const before = await used();
      const keysBefore = await admin.dbsize();
      const n = 100_000;
      await churn(issuer, 'churn', n, 256);
      const perKey = ((await used()) - before) / n;
      const keysPerKey = ((await admin.dbsize()) - keysBefore) / n;
      console.log(`redis: ${perKey.toFixed(0)} B and ${keysPerKey} keys per released key`);
      expect(keysPerKey).toBe(2); // the token counter and the idempotency record
      expect(perKey).toBeLessThanOrEqual(REDIS_BYTES_PER_KEY);

      // Grants never released: the issuer's hold-time map stays bounded.
      await parallel(20_000, 256, async (i) => {
        const r = await issuer.acquire({ key: `held:${i}`, owner: 'o', ttlMs: 60_000, waitMs: 0 });
        if (!r.ok) throw new Error('no grant');
      });
      expect(issuer.trackedGrants).toBeLessThanOrEqual(MAX_TRACKED_GRANTS);
      issuer.shutdown();
    } finally {
      admin.disconnect();
    }
  }, 300_000);
});

type SqlKind = 'postgres' | 'embedded';
// Each SQL grant is a transaction of several statements with a durable commit: fewer keys
// keep the run short; the counts per key are exact whatever the number.
const SQL_KEYS: Record<SqlKind, number> = { postgres: 4000, embedded: 1500 };

describe.each(['postgres', 'embedded'] as SqlKind[])('memory under churn: %s', (kind) => {
  let store: Store | null = null;
  let cleanup: () => Promise<void> = async () => undefined;
  afterAll(async () => {
    await store?.close();
    await cleanup();
  });

  it('one locks row and one grants row per released key; the cleanup clears an expired backlog', async () => {
    const schema = uniqueName('fgchurn');
    let query: (sql: string) => Promise<Record<string, unknown>[]>;
    if (kind === 'postgres') {
      store = await openPostgresStore(POSTGRES_URL, { namespace: schema });
      const client = new pg.Client({ connectionString: POSTGRES_URL });
      await client.connect();
      query = async (sql) => (await client.query(sql)).rows as Record<string, unknown>[];
      cleanup = async () => {
        await client.end();
        await dropPostgresSchema(POSTGRES_URL, schema);
      };
    } else {
      const dir = await freshEmbeddedDir('fg-churn-');
      store = await openEmbeddedStore(dir, { namespace: schema });
      // One process per directory: read through the store's own driver.
      const driver = (store as unknown as { ctx: { driver: { query(sql: string): Promise<unknown[]> } } }).ctx
        .driver;
      query = async (sql) => (await driver.query(sql)) as Record<string, unknown>[];
      cleanup = () => rm(dir, { recursive: true, force: true });
    }
    const count = async (table: string, where = 'true') =>
      Number((await query(`SELECT count(*)::int AS n FROM "${schema}".${table} WHERE ${where}`))[0]?.n);
    const issuer = new Issuer(store, createMetrics({ defaultMetrics: false }));
    const n = SQL_KEYS[kind];
    await churn(issuer, 'churn', n, kind === 'postgres' ? 16 : 4);
    expect(await count('locks')).toBe(n);
    expect(await count('grants')).toBe(n);
    expect(await count('waiters')).toBe(0);
    const bytes = await query(
      `SELECT pg_total_relation_size('"${schema}".locks') + pg_total_relation_size('"${schema}".grants') AS b`,
    );
    console.log(
      `${kind}: ${(Number(bytes[0]?.b) / n).toFixed(0)} B on disk per released key (locks + grants)`,
    );

    // A backlog of records past their retention, then sustained distinct-key acquires.
    const backlog = 30_000;
    await query(
      `INSERT INTO "${schema}".grants (key, request_id, owner, lease_id, token, ttl_ms, expires_at, took_over, keep_until)
       SELECT 'old:' || i, 'r', 'o', 'l' || i, i, 1000, 1, false, 1 FROM generate_series(1, ${backlog}) i`,
    );
    const more = Math.min(n, 2000);
    await churn(issuer, 'sustained', more, kind === 'postgres' ? 16 : 4);
    // The grants themselves trimmed two expired records each; a background sweep (a round
    // at most every 10 s, started by store calls) repeats while its batches come back
    // full. Acquires go on at a trickle while waiting, as in service (bounded).
    const end = Date.now() + 90_000;
    let trickle = 0;
    while ((await count('grants', 'keep_until <= 1')) > 0 && Date.now() < end) {
      await churn(issuer, `trickle${trickle++}`, 1, 1);
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(await count('grants', 'keep_until <= 1')).toBe(0);
    expect(await count('grants')).toBe(n + more + trickle);
    issuer.shutdown();
  }, 300_000);
});
