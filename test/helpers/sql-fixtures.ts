/**
 * Fixtures for the store behaviour tests: a Postgres store on a random schema of the
 * shared test database (dropped after, never touching other schemas), and an
 * embedded (LMDB) store in a fresh temporary directory.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { openEmbeddedStore } from '../../src/store/lmdb/store.js';
import { openPostgresStore } from '../../src/store/sql/store.js';
import type { Store } from '../../src/store/types.js';
import { sleep } from './wait.js';

export const PG_URL = process.env.FENCEGATE_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';

export { sleep };

export function randomSchema(prefix = 'fgsql'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

export async function withPgClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

export async function dropSchema(url: string, schema: string): Promise<void> {
  await withPgClient(url, (c) => c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
}

export interface SqlFixture {
  name: 'postgres' | 'embedded';
  store: Store;
  /** Opens a second store on the same data. */
  openAnother?: () => Promise<Store>;
  close(): Promise<void>;
}

export async function postgresFixture(): Promise<SqlFixture & { schema: string }> {
  const schema = randomSchema();
  const store = await openPostgresStore(PG_URL, { namespace: schema });
  const others: Store[] = [];
  return {
    name: 'postgres',
    schema,
    store,
    async openAnother() {
      const s = await openPostgresStore(PG_URL, { namespace: schema });
      others.push(s);
      return s;
    },
    async close() {
      await Promise.all([store, ...others].map((s) => s.close()));
      await dropSchema(PG_URL, schema);
    },
  };
}

export async function embeddedFixture(): Promise<SqlFixture & { dir: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'fg-sql-'));
  const others: Store[] = [];
  const f = {
    name: 'embedded' as const,
    dir,
    store: await openEmbeddedStore(dir),
    async openAnother() {
      const s = await openEmbeddedStore(dir);
      others.push(s);
      return s;
    },
    async close() {
      await Promise.all([f.store, ...others].map((s) => s.close()));
      await rm(dir, { recursive: true, force: true });
    },
  };
  return f;
}
