/**
 * Test-only access to an embedded store's data, bypassing the store: puts a key's
 * issued counter where grants alone would take ages to reach (above 2^53, next to
 * 2^63-1). LMDB lets several handles share a directory, so the store under test stays
 * open: this opens the data file on its own, writes in one transaction and closes.
 *
 * The key's floor is kept when its record exists (lowered below the token if need
 * be), else set to 0 (as redis-seed.ts), so the next grant mints
 * max(token, global epoch floor) + 1.
 */
import { join } from 'node:path';
import { DATA_FILE, openTables, type LockRec } from '../../src/store/lmdb/db.js';
import { DEFAULT_NAMESPACE } from '../../src/store/lmdb/store.js';

export async function seedEmbeddedIssued(
  dir: string,
  key: string,
  token: bigint,
  namespace = DEFAULT_NAMESPACE,
): Promise<void> {
  const t = openTables(join(dir, DATA_FILE), namespace);
  try {
    await t.root.transaction(() => {
      t.locks.put(key, seededLock(t.locks.get(key), token));
    });
  } finally {
    await t.root.close();
  }
}

/**
 * A lock record whose issued counter is `token`, the rest kept from `old` (the record as
 * the embedded and etcd stores keep it): its floor kept, lowered below the token if need
 * be, or 0 for a new record.
 */
export function seededLock(old: LockRec | undefined, token: bigint): LockRec {
  const floor = old === undefined ? 0n : BigInt(old.floor) < token ? BigInt(old.floor) : token - 1n;
  return {
    floor: floor.toString(),
    issued: token.toString(),
    highest: old?.highest ?? null,
    shadowHighest: old?.shadowHighest ?? null,
    leaseId: old?.leaseId ?? null,
    owner: old?.owner ?? null,
    token: old?.token ?? null,
    ttlMs: old?.ttlMs ?? null,
    expiresAt: old?.expiresAt ?? null,
  };
}
