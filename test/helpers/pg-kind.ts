/**
 * Fixtures for the postgres kind's tests: a random schema for the table and a random
 * fence schema in the shared test database (both dropped after; shared schemas are
 * never touched), and PostgresRows runtimes on them.
 */
import { parseRowObject, type BodyValue } from '../../src/gateway/kinds/postgres/json-body.js';
import { PostgresRows } from '../../src/gateway/kinds/postgres/rows.js';
import {
  compilePostgresRoute,
  compilePostgresUpstream,
  type PostgresRouteSettings,
} from '../../src/gateway/kinds/postgres/settings.js';
import { dropSchema, PG_URL, randomSchema, withPgClient } from './sql-fixtures.js';

export { PG_URL };

export const quietLog = { warn: () => {}, error: () => {} };

/** A write's body as the kind reads it: from an object (JSON.stringify) or from JSON text as sent. */
export function rowBody(body: Record<string, unknown> | string): Map<string, BodyValue> {
  const parsed = parseRowObject(Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)));
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.members;
}

export interface PgKindFixture {
  schema: string;
  fenceSchema: string;
  /** Runs SQL on a fresh client ({s} is replaced by the quoted table schema, {f} by the fence schema). */
  sql(text: string, params?: unknown[]): Promise<Record<string, unknown>[]>;
  rows(
    url?: string,
    opts?: {
      preparedStatements?: boolean;
      poolSize?: number;
      pooler?: 'none' | 'transaction';
      timeoutMs?: number;
    },
  ): PostgresRows;
  route(table: string, key: string, columns: string[], params?: string[]): PostgresRouteSettings;
  close(): Promise<void>;
}

export async function pgKindFixture(): Promise<PgKindFixture> {
  const schema = randomSchema('fgkind');
  const fenceSchema = randomSchema('fgfence');
  const opened: PostgresRows[] = [];
  const bind = (text: string): string =>
    text.replaceAll('{s}', `"${schema}"`).replaceAll('{f}', `"${fenceSchema}"`);
  await withPgClient(PG_URL, (c) => c.query(`CREATE SCHEMA "${schema}"`));
  return {
    schema,
    fenceSchema,
    async sql(text, params = []) {
      return withPgClient(
        PG_URL,
        async (c) => (await c.query(bind(text), params)).rows as Record<string, unknown>[],
      );
    },
    rows(url = PG_URL, opts = {}) {
      const s = compilePostgresUpstream({ url, fenceSchema, ...opts });
      if (!s.ok) throw new Error(JSON.stringify(s.errors));
      const r = new PostgresRows('shop', s.value, quietLog);
      opened.push(r);
      return r;
    },
    route(table, key, columns, params = [key]) {
      const methods = params.length === 0 ? ['GET'] : ['GET', 'PUT', 'PATCH', 'DELETE'];
      const r = compilePostgresRoute({ table: `${schema}.${table}`, key, columns }, params, methods);
      if (!r.ok) throw new Error(JSON.stringify(r.errors));
      return r.value;
    },
    async close() {
      await Promise.all(opened.map((r) => r.close()));
      await dropSchema(PG_URL, schema);
      await dropSchema(PG_URL, fenceSchema);
    },
  };
}
