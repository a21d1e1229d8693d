/**
 * Test-only access to the Postgres store's data, bypassing the store: puts a key's
 * issued counter where grants alone would take ages to reach (above 2^53, next to
 * 2^63-1). Nothing test-only lives in production code: Postgres is reached with its
 * own client. (The embedded store's counterpart is embedded-seed.ts.)
 *
 * The key's floor is kept when its row exists, else set to 0 (as redis-seed.ts),
 * so the next grant mints max(token, global epoch floor) + 1.
 */
import pg from 'pg';
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
