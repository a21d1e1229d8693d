/**
 * Entry points of the SQL stores:
 * - openPostgresStore(url): a Postgres server, shared by many fencegate processes;
 * - openEmbeddedStore(dir): PGlite in a local directory, one process at a time.
 * Both create their schema (namespace, default "fencegate") if missing, safely
 * when several processes start at once, and then speak the same SQL.
 */
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { StoreUnavailableError } from '../../errors.js';
import type { Store, StoreOptions } from '../types.js';
import { lockDirectory } from './dir-lock.js';
import { checkNamespace, errorCode, type SqlDriver } from './driver.js';
import { PgDriver } from './pg-driver.js';
import { PgliteDriver } from './pglite-driver.js';
import { queriesFor, schemaSql, SCHEMA_VERSION, type DurabilityRow } from './queries.js';
import { SqlStore } from './sql-store.js';

export const DEFAULT_NAMESPACE = 'fencegate';

/**
 * Fence batches (batcher.ts) in flight at once, and their size limit. Postgres: a
 * batch that waits for row locks or its commit's WAL flush leaves the next one free
 * to start. PGlite runs one statement at a time anyway.
 */
const POSTGRES_BATCHING = { parallel: 2, maxBatch: 256 };
const EMBEDDED_BATCHING = { parallel: 1, maxBatch: 256 };
/** Where PGlite keeps its data inside an embedded store directory (next to LOCK). */
export const EMBEDDED_DATA_DIR = 'pgdata';

/** Creates or checks the schema in one transaction, serialised across processes by an advisory lock. */
async function initSchema(driver: SqlDriver, namespace: string): Promise<void> {
  const q = queriesFor(namespace);
  await driver.transaction(async (tx) => {
    await tx.query(q.init_lock, [namespace]);
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
    await initSchema(driver, namespace);
  } catch (err) {
    await driver.close().catch(() => undefined);
    throw openFailure(err, `the Postgres store (schema "${namespace}")`);
  }
  const store = new SqlStore(driver, {
    namespace,
    detail: await durabilityNote(driver, namespace),
    batching: POSTGRES_BATCHING,
  });
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

export async function openEmbeddedStore(dir: string, opts: StoreOptions = {}): Promise<Store> {
  const namespace = checkNamespace(opts.namespace ?? DEFAULT_NAMESPACE);
  const root = resolve(dir);
  try {
    mkdirSync(root, { recursive: true });
  } catch (err) {
    throw new StoreUnavailableError(
      `cannot create embedded store directory ${root}: ${errorCode(err) ?? 'error'}`,
      {
        cause: err,
      },
    );
  }
  const lock = lockDirectory(root);
  let driver: PgliteDriver | null = null;
  try {
    driver = await PgliteDriver.open(join(root, EMBEDDED_DATA_DIR), `embedded store ${root}`);
    await initSchema(driver, namespace);
  } catch (err) {
    await driver?.close().catch(() => undefined);
    lock.release();
    throw openFailure(err, `the embedded store in ${root}`);
  }
  const durability = driver.synced
    ? 'fsync on every commit'
    : 'fsync unavailable: survives process crashes, not power loss';
  const store = new SqlStore(driver, {
    namespace,
    detail: durability,
    onClose: () => lock.release(),
    batching: EMBEDDED_BATCHING,
  });
  await store.warm().catch(() => undefined); // an optimisation: a failure shows at the first write
  return store;
}
