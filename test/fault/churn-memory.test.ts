/**
 * Memory under churn: many distinct keys acquired and released, then what the store and
 * the process keep, measured against the bounds documented in docs/stores-redis.md,
 * docs/stores-sql.md and docs/issuer.md ("Memory under churn").
 *
 * - Redis (a private redis-server, so INFO memory sees nothing else): 100k keys through
 *   the issuer; after release each key keeps its token counter (forever) and a small
 *   idempotency record (10 min). The growth per key must stay under REDIS_BYTES_PER_KEY.
 *   The issuer's hold-time bookkeeping stays bounded while 20k grants are never released.
 * - Postgres and embedded: fewer keys (each grant is a durable transaction); exactly
 *   one lock record and at most one idempotency record per key are left.
 *   Then the idempotency cleanup: a backlog of expired records (as left by a burst of
 *   distinct-key acquires ten minutes earlier) is gone while acquires go on at full speed
 *   on distinct keys, so the table stays bounded by the records still within their
 *   retention. Before, a process deleted at most 500 rows per 30 s.
 */
import { statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { Issuer, MAX_TRACKED_GRANTS } from '../../src/issuer/service.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { openRedisStore } from '../../src/store/redis/store.js';
import { DATA_FILE, openTables, type Tables } from '../../src/store/lmdb/db.js';
import { DEFAULT_NAMESPACE, openEmbeddedStore } from '../../src/store/lmdb/store.js';
import { openPostgresStore } from '../../src/store/sql/store.js';
import type { Store } from '../../src/store/types.js';
import { freshEmbeddedDir } from '../helpers/embedded-template.js';
import { startRedis, type RedisProcess } from '../helpers/procs.js';
import { dropPostgresSchema, POSTGRES_URL, uniqueName } from '../helpers/stores.js';
import { sleep } from '../helpers/wait.js';

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

// Each SQL grant is a transaction of several statements with a durable commit: fewer keys
// keep the run short; the counts per key are exact whatever the number.
const SQL_KEYS = 4000;

describe('memory under churn: postgres', () => {
  let store: Store | null = null;
  let cleanup: () => Promise<void> = async () => undefined;
  afterAll(async () => {
    await store?.close();
    await cleanup();
  });

  it('one locks row and one grants row per released key; the cleanup clears an expired backlog', async () => {
    const schema = uniqueName('fgchurn');
    store = await openPostgresStore(POSTGRES_URL, { namespace: schema });
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    const query = async (sql: string) => (await client.query(sql)).rows as Record<string, unknown>[];
    cleanup = async () => {
      await client.end();
      await dropPostgresSchema(POSTGRES_URL, schema);
    };
    const count = async (table: string, where = 'true') =>
      Number((await query(`SELECT count(*)::int AS n FROM "${schema}".${table} WHERE ${where}`))[0]?.n);
    const issuer = new Issuer(store, createMetrics({ defaultMetrics: false }));
    const n = SQL_KEYS;
    await churn(issuer, 'churn', n, 16);
    expect(await count('locks')).toBe(n);
    expect(await count('grants')).toBe(n);
    expect(await count('waiters')).toBe(0);
    const bytes = await query(
      `SELECT pg_total_relation_size('"${schema}".locks') + pg_total_relation_size('"${schema}".grants') AS b`,
    );
    console.log(
      `postgres: ${(Number(bytes[0]?.b) / n).toFixed(0)} B on disk per released key (locks + grants)`,
    );

    // A backlog of records past their retention, then sustained distinct-key acquires.
    const backlog = 30_000;
    await query(
      `INSERT INTO "${schema}".grants (key, request_id, owner, lease_id, token, ttl_ms, expires_at, took_over, keep_until)
       SELECT 'old:' || i, 'r', 'o', 'l' || i, i, 1000, 1, false, 1 FROM generate_series(1, ${backlog}) i`,
    );
    const more = Math.min(n, 2000);
    await churn(issuer, 'sustained', more, 16);
    // The grants themselves trimmed two expired records each; a background sweep (a round
    // at most every 10 s, started by store calls) repeats while its batches come back
    // full. Acquires go on at a trickle while waiting, as in service (bounded).
    const end = Date.now() + 90_000;
    let trickle = 0;
    while ((await count('grants', 'keep_until <= 1')) > 0 && Date.now() < end) {
      await churn(issuer, `trickle${trickle++}`, 1, 1);
      await sleep(500);
    }
    expect(await count('grants', 'keep_until <= 1')).toBe(0);
    expect(await count('grants')).toBe(n + more + trickle);
    issuer.shutdown();
  }, 300_000);
});

// Each embedded grant is one write transaction; grants of one event-loop turn commit together.
const EMBEDDED_KEYS = 4000;

describe('memory under churn: embedded', () => {
  let store: Store | null = null;
  let tables: Tables | null = null;
  let dir = '';
  afterAll(async () => {
    await store?.close();
    await tables?.root.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('one locks record and one grants record per released key; the cleanup clears an expired backlog', async () => {
    dir = await freshEmbeddedDir('fg-churn-');
    store = await openEmbeddedStore(dir);
    // A second handle on the same directory (LMDB allows several) reads the records directly.
    const t = openTables(join(dir, DATA_FILE), DEFAULT_NAMESPACE);
    tables = t;
    const count = (db: { getKeysCount(): number }) => {
      t.root.resetReadTxn();
      return db.getKeysCount();
    };
    const issuer = new Issuer(store, createMetrics({ defaultMetrics: false }));
    const n = EMBEDDED_KEYS;
    await churn(issuer, 'churn', n, 16);
    expect(count(t.lockRecords)).toBe(n);
    expect(count(t.grants)).toBe(n);
    expect(count(t.waiters)).toBe(0);
    expect(count(t.inflight)).toBe(0);
    console.log(
      `embedded: ${(statSync(join(dir, DATA_FILE)).size / n).toFixed(0)} B on disk per released key (whole file)`,
    );

    // A backlog of records past their retention, then sustained distinct-key acquires.
    const backlog = 30_000;
    await t.root.transaction(() => {
      for (let i = 1; i <= backlog; i++) {
        t.grants.put([`old:${i}`, 'r', 'o'], {
          leaseId: `l${i}`,
          token: String(i),
          ttlMs: 1000,
          expiresAt: 1,
          tookOver: false,
          keepUntil: 1,
        });
      }
    });
    const more = 2000;
    await churn(issuer, 'sustained', more, 16);
    // A background sweep (a round at most every 10 s, started by store calls) deletes
    // every expired record. Acquires go on at a trickle while waiting, as in service.
    const expired = () => {
      t.root.resetReadTxn();
      let k = 0;
      for (const { value } of t.grants.getRange({})) if (value.keepUntil <= 1) k++;
      return k;
    };
    const end = Date.now() + 90_000;
    let trickle = 0;
    while (expired() > 0 && Date.now() < end) {
      await churn(issuer, `trickle${trickle++}`, 1, 1);
      await sleep(500);
    }
    expect(expired()).toBe(0);
    expect(count(t.grants)).toBe(n + more + trickle);
    issuer.shutdown();
  }, 300_000);
});
