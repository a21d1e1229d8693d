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
      const old = t.locks.get(key);
      const floor = old === undefined ? 0n : BigInt(old.floor) < token ? BigInt(old.floor) : token - 1n;
      const rec: LockRec = {
        floor: floor.toString(),
        issued: token.toString(),
        highest: old?.highest ?? null,
        leaseId: old?.leaseId ?? null,
        owner: old?.owner ?? null,
        token: old?.token ?? null,
        ttlMs: old?.ttlMs ?? null,
        expiresAt: old?.expiresAt ?? null,
      };
      t.locks.put(key, rec);
    });
  } finally {
    await t.root.close();
  }
}
