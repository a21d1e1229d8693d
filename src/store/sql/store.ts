/**
 * Entry point of the SQL store: openPostgresStore(url), a Postgres server shared by
 * many fencegate processes. It creates its schema (namespace, default "fencegate") if
 * missing, safely when several processes start at once. (The embedded store is
 * src/store/lmdb/: docs/adr/0009-embedded-store.md.)
 */
import { StoreUnavailableError } from '../../errors.js';
import { defaultNamespace } from '../namespace.js';
import type { Store, StoreOptions } from '../types.js';
import { checkNamespace, quoteIdent, type SqlDriver } from './driver.js';
import { PgDriver } from './pg-driver.js';
import { queriesFor, schemaSql, SCHEMA_VERSION, type DurabilityRow } from './queries.js';
import { SqlStore } from './sql-store.js';

export const DEFAULT_NAMESPACE = defaultNamespace('postgres');

/**
 * Fence batches (batcher.ts) in flight at once, and their size limit: a batch that waits
 * for row locks or its commit's WAL flush leaves the next one free to start.
 */
const POSTGRES_BATCHING = { parallel: 2, maxBatch: 256 };

/** Creates or checks the schema in one transaction, serialised across processes by an advisory lock. */
async function initSchema(driver: SqlDriver, namespace: string, mustExist: boolean): Promise<void> {
  const q = queriesFor(namespace);
  await driver.transaction(async (tx) => {
    await tx.query(q.init_lock, [namespace]);
    if (mustExist) {
      const found = await tx.query<{ meta: string | null }>('SELECT to_regclass($1)::text AS meta', [
        `${quoteIdent(namespace)}.meta`,
      ]);
      if (found[0]?.meta == null) {
        throw new StoreUnavailableError(`${driver.where}: there is no fencegate schema "${namespace}"`);
      }
    }
    await tx.exec(schemaSql(namespace));
    const rows = await tx.query<{ value: string }>(q.schema_version);
    const version = rows[0]?.value;
    if (version !== SCHEMA_VERSION) {
      throw new StoreUnavailableError(
        `${driver.where}: schema "${namespace}" has version ${version ?? 'none'}, this fencegate expects ${SCHEMA_VERSION}`,
      );
    }
  });
}

function openFailure(err: unknown, what: string): StoreUnavailableError {
  const why = err instanceof Error ? err.message.split('\n')[0] : String(err);
  return new StoreUnavailableError(`cannot open ${what}: ${why}`, { cause: err });
}

export async function openPostgresStore(url: string, opts: StoreOptions = {}): Promise<Store> {
  const namespace = checkNamespace(opts.namespace ?? DEFAULT_NAMESPACE);
  const driver = new PgDriver(url);
  try {
    await initSchema(driver, namespace, opts.mustExist === true);
  } catch (err) {
    await driver.close().catch(() => undefined);
    throw openFailure(err, `the Postgres store (schema "${namespace}")`);
  }
  const store = new SqlStore(driver, {
    namespace,
    detail: await durabilityNote(driver, namespace),
    batching: POSTGRES_BATCHING,
  });
  try {
    await store.verify();
  } catch (err) {
    await store.close().catch(() => undefined);
    throw openFailure(err, `the Postgres store (schema "${namespace}")`);
  }
  await store.warm().catch(() => undefined); // an optimisation: a failure shows at the first write
  return store;
}

/**
 * What the server's settings mean for crash safety, for health(). Not a refusal:
 * throwaway and CI servers often run with fsync off, and the store has no option
 * to accept it explicitly; the note makes the risk visible instead.
 */
async function durabilityNote(driver: SqlDriver, namespace: string): Promise<string> {
  const rows = await driver
    .query<DurabilityRow>(queriesFor(namespace).durability)
    .catch(() => [] as DurabilityRow[]);
  const r = rows[0];
  if (!r) return 'durability settings unknown';
  const risks: string[] = [];
  if (r.fsync !== 'on') risks.push('fsync is off');
  if (r.synchronous_commit === 'off') risks.push('synchronous_commit is off');
  return risks.length > 0
    ? `NOT crash-safe: ${risks.join(', ')} (an acknowledged grant can be lost and its token reissued)`
    : `fsync on, synchronous_commit ${r.synchronous_commit}`;
}
