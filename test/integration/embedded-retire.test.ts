/**
 * The embedded store's lock records (docs/adr/0022-compact-lock-records.md):
 * - retiring idle lock records (src/store/lmdb/retire.ts): a retired key's old tokens are
 *   refused stale, never admitted; its next grant is above every token it had; a lock
 *   with a live lease, waiters or in-flight writes is kept;
 * - a directory written by format 2 (two msgpack records per lock) opens, is rewritten to
 *   format 3, and keeps its tokens, fences, leases and grant history.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open as openLmdb } from 'lmdb';
import { afterEach, describe, expect, it } from 'vitest';
import { DATA_FILE, openTables, type LockRec, type Tables } from '../../src/store/lmdb/db.js';
import { housekeep } from '../../src/store/lmdb/prune.js';
import { DEFAULT_NAMESPACE, openEmbeddedStore } from '../../src/store/lmdb/store.js';
import type { Store } from '../../src/store/types.js';
import { sleep } from '../helpers/wait.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'fg-retire-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function open(dir: string): Promise<Store> {
  const store = await openEmbeddedStore(dir);
  cleanups.push(() => store.close());
  return store;
}

/** A second handle on the directory, to run housekeeping with a short retention and read records. */
function tables(dir: string): Tables {
  const t = openTables(join(dir, DATA_FILE), DEFAULT_NAMESPACE);
  cleanups.push(() => t.root.close());
  return t;
}

const never = () => false;
const RETENTION = 20;

async function retireIdle(t: Tables): Promise<void> {
  await sleep(RETENTION * 2);
  await housekeep(t, never, RETENTION);
  t.root.resetReadTxn();
}

async function grant(store: Store, key: string, ttlMs = 60_000) {
  const g = await store.tryAcquire({ key, owner: 'a', ttlMs });
  if (!g.ok) throw new Error(`expected a grant of ${key}: ${JSON.stringify(g)}`);
  return g.lease;
}

describe('embedded store: retiring idle lock records', { timeout: 60_000 }, () => {
  it('refuses a retired lock’s old token as stale, and grants above it', async () => {
    const dir = await tempDir();
    const store = await open(dir);
    await store.openSession('s', 60_000);
    const a = await grant(store, 'k');
    const w = { lock: 'k', token: a.token, check: 'token' as const, record: true as const, session: 's' };
    expect(await store.admit({ ...w, requestId: 'w1' })).toMatchObject({ ok: true });
    await store.finish('k', 'w1');
    expect(await store.release('k', a.leaseId)).toEqual({ ok: true });
    // A holder whose lease lapsed long ago and was never superseded (no release).
    const lapsed = await grant(store, 'lapsed', 1);

    const t = tables(dir);
    await retireIdle(t);
    expect(t.lockRecords.get('k')).toBeUndefined();
    expect(t.lockRecords.get('lapsed')).toBeUndefined();
    const retired = BigInt(t.meta.get('retired') as string);
    expect(retired).toBeGreaterThanOrEqual(a.token);
    expect(retired).toBeGreaterThanOrEqual(lapsed.token);
    expect(await store.inspect('k')).toBeNull();

    // The old tokens: stale, never admitted (not forged: they were issued).
    expect(await store.admit({ ...w, requestId: 'w2' })).toMatchObject({ ok: false, reason: 'stale' });
    expect(await store.admit({ ...w, lock: 'lapsed', token: lapsed.token, requestId: 'w3' })).toMatchObject({
      ok: false,
      reason: 'stale',
    });
    // A token above every retired one, for a key never granted: forged, as before.
    expect(await store.admit({ ...w, lock: 'never', token: retired + 1n, requestId: 'w4' })).toMatchObject({
      ok: false,
      reason: 'forged',
    });

    // The next grant is above every token the key had, and above the retired floor.
    const b = await grant(store, 'k');
    expect(b.token).toBeGreaterThan(retired);
    expect(await store.admit({ ...w, token: b.token, requestId: 'w5' })).toMatchObject({ ok: true });
    expect(await store.admit({ ...w, token: a.token, requestId: 'w6' })).toMatchObject({
      ok: false,
      reason: 'stale',
    });
    // So is a waiter's new record.
    await store.enqueueWaiter('q', 'waiter', 60_000);
    t.root.resetReadTxn();
    expect(BigInt(t.lockRecords.get('q')?.floor ?? '0')).toBeGreaterThanOrEqual(retired);
    const c = await store.tryAcquire({ key: 'q', owner: 'a', ttlMs: 60_000, waiterId: 'waiter' });
    expect(c.ok && c.lease.token > retired).toBe(true);
  });

  it('keeps a lock with a live lease, a waiter or a write in flight, and one used within the retention', async () => {
    const dir = await tempDir();
    const store = await open(dir);
    await store.openSession('s', 60_000);
    await grant(store, 'held');
    const f = await grant(store, 'inflight');
    await store.release('inflight', f.leaseId);
    await store.admit({
      lock: 'inflight',
      token: f.token,
      check: 'token',
      record: true,
      session: 's',
      requestId: 'w',
    });
    const q = await grant(store, 'queued');
    await store.release('queued', q.leaseId);
    await store.enqueueWaiter('queued', 'w1', 60_000);

    const t = tables(dir);
    await retireIdle(t);
    for (const key of ['held', 'inflight', 'queued']) expect(t.lockRecords.get(key)).toBeDefined();
    expect(t.meta.get('retired')).toBeUndefined();

    // Used again just now: kept for another retention.
    await store.finish('inflight', 'w');
    await housekeep(t, never, 60_000);
    t.root.resetReadTxn();
    expect(t.lockRecords.get('inflight')).toBeDefined();
  });

  it('retires through the store’s own housekeeping with lockRetentionMs', async () => {
    const dir = await tempDir();
    const store = await openEmbeddedStore(dir, { lockRetentionMs: 1 });
    cleanups.push(() => store.close());
    const a = await grant(store, 'k');
    await store.release('k', a.leaseId);
    await sleep(20);
    // The first write of the process starts a housekeeping round (then one every 10 s at most).
    await store.close();
    const again = await openEmbeddedStore(dir, { lockRetentionMs: 1 });
    cleanups.push(() => again.close());
    const other = await grant(again, 'other'); // starts the round
    const t = tables(dir);
    for (let i = 0; i < 100 && t.lockRecords.get('k') !== undefined; i++) {
      await sleep(20);
      t.root.resetReadTxn();
    }
    expect(t.lockRecords.get('k')).toBeUndefined();
    expect(BigInt(t.meta.get('retired') as string)).toBeGreaterThanOrEqual(a.token);
    expect(other.token).toBeGreaterThan(0n);
  });
});

describe('embedded store: format 2 directories', { timeout: 60_000 }, () => {
  it('opens one written by format 2, rewrites it to format 3 and keeps tokens, fences, leases and history', async () => {
    const dir = await tempDir();
    const now = Date.now();
    const floor = BigInt(now - 1000) * 1000n;
    const tok = (n: number) => (floor + BigInt(n)).toString();
    // Format 2 as it wrote them: msgpack records in `locks` and `owners`.
    const root = openLmdb({ path: join(dir, DATA_FILE), maxDbs: 200 });
    const ns = DEFAULT_NAMESPACE;
    const meta = root.openDB<unknown, string>({ name: `${ns}/meta` });
    const locks = root.openDB<LockRec, string>({ name: `${ns}/locks` });
    const owners = root.openDB<[string, string][], string>({ name: `${ns}/owners` });
    const epochFloor = (BigInt(now - 5000) * 1000n).toString();
    await root.transaction(() => {
      void meta.put('format', '2');
      void meta.put('epoch', { id: 'e1', floor: epochFloor, startedAt: now - 5000 });
      void locks.put('idle', {
        floor: floor.toString(),
        issued: tok(3),
        highest: tok(3),
        shadowHighest: null,
        leaseId: null,
        owner: null,
        token: null,
        ttlMs: null,
        expiresAt: null,
      });
      void owners.put('idle', [
        [tok(3), 'c'],
        [tok(2), 'b'],
        [tok(1), 'a'],
      ]);
      void locks.put('held', {
        floor: floor.toString(),
        issued: tok(7),
        highest: tok(6),
        leaseId: 'lease-held',
        owner: 'h',
        token: tok(7),
        ttlMs: 600_000,
        expiresAt: now + 600_000,
      });
      void owners.put('held', [[tok(7), 'h']]);
      void owners.put('orphan', [[tok(1), 'x']]);
    });
    await root.close();

    const store = await open(dir);
    expect(await store.recentGrants('idle')).toEqual([
      { token: BigInt(tok(3)), owner: 'c' },
      { token: BigInt(tok(2)), owner: 'b' },
      { token: BigInt(tok(1)), owner: 'a' },
    ]);
    expect(await store.inspect('held')).toMatchObject({
      held: true,
      owner: 'h',
      token: BigInt(tok(7)),
      highest: BigInt(tok(6)),
    });
    expect(await store.renew('held', 'lease-held', 600_000)).toMatchObject({ ok: true });
    await store.openSession('s', 60_000);
    const w = { check: 'token' as const, record: true as const, session: 's' };
    expect(await store.admit({ ...w, lock: 'idle', token: BigInt(tok(2)), requestId: 'r1' })).toMatchObject({
      ok: false,
      reason: 'stale',
    });
    const next = await grant(store, 'idle');
    expect(next.token).toBe(BigInt(tok(4)));
    expect((await store.recentGrants('idle')).map((g) => g.owner)).toEqual(['a', 'c', 'b', 'a']);

    const t = tables(dir);
    expect(t.meta.get('format')).toBe('3');
    const legacyOwners = t.root.openDB<unknown, string>({ name: `${ns}/owners` });
    expect([...legacyOwners.getKeys({})]).toEqual([]);
    expect(t.lockRecords.get('held')?.owners).toEqual([[tok(7), 'h']]);
  });
});
