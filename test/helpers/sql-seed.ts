/**
 * Test-only access to the SQL stores' data, bypassing the store: puts a key's
 * issued counter where grants alone would take ages to reach (above 2^53, next to
 * 2^63-1). Nothing test-only lives in production code: Postgres is reached with
 * its own client; an embedded directory (one process, one opener) is seeded by
 * closing the store, opening PGlite on the directory directly, and reopening.
 *
 * The key's floor is kept when its row exists, else set to 0 (as redis-seed.ts),
 * so the next grant mints max(token, global epoch floor) + 1.
 */
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { join } from 'node:path';
import { DEFAULT_NAMESPACE, EMBEDDED_DATA_DIR, openEmbeddedStore } from '../../src/store/sql/store.js';
import type { Store } from '../../src/store/types.js';
import { formatToken } from '../../src/tokens.js';

function seedSql(schema: string): string {
  const s = `"${schema.replace(/"/g, '""')}"`;
  return `INSERT INTO ${s}.locks AS l (key, floor, issued) VALUES ($1::text, 0, $2::bigint)
          ON CONFLICT (key) DO UPDATE
          SET issued = excluded.issued, floor = least(l.floor, excluded.issued - 1)`;
}

/** Sets the issued counter of `key` in a Postgres store's schema. */
export async function seedPostgresIssued(
  url: string,
  schema: string,
  key: string,
  token: bigint,
): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(seedSql(schema), [key, formatToken(token)]);
  } finally {
    await c.end();
  }
}

/** Seeds a closed embedded store directory. */
export async function seedEmbeddedDir(
  dir: string,
  key: string,
  token: bigint,
  namespace = DEFAULT_NAMESPACE,
): Promise<void> {
  const db = await PGlite.create(join(dir, EMBEDDED_DATA_DIR));
  try {
    await db.query(seedSql(namespace), [key, formatToken(token)]);
  } finally {
    await db.close();
  }
}

/**
 * Closes `store` (opened on `dir`), seeds the directory, and returns the store
 * reopened on it. Use the returned store from then on.
 */
export async function seedEmbeddedIssued(
  store: Store,
  dir: string,
  key: string,
  token: bigint,
  namespace = DEFAULT_NAMESPACE,
): Promise<Store> {
  await store.close();
  await seedEmbeddedDir(dir, key, token, namespace);
  return openEmbeddedStore(dir, { namespace });
}

export type SqlTarget =
  { kind: 'postgres'; url: string; schema: string } | { kind: 'embedded'; dir: string; namespace?: string };

/** Either of the above for a closed embedded directory or a Postgres schema. */
export function seedSqlIssued(target: SqlTarget, key: string, token: bigint): Promise<void> {
  return target.kind === 'postgres'
    ? seedPostgresIssued(target.url, target.schema, key, token)
    : seedEmbeddedDir(target.dir, key, token, target.namespace);
}
