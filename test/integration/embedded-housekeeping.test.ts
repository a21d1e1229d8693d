/**
 * The embedded store's housekeeping (src/store/lmdb/prune.ts) on a real LMDB file: it
 * sweeps each table in passes of a bounded number of records, so that a table of many
 * locks never sits in memory whole (issue 30), and across passes it still removes every
 * expired record and no live one, whatever their order. Also: the data file is mapped
 * once at MAP_SIZE, not remapped in steps as it grows.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DATA_FILE, MAP_SIZE, nowMs, openTables, type Tables } from '../../src/store/lmdb/db.js';
import { housekeep, sweepTable } from '../../src/store/lmdb/prune.js';
import { DEFAULT_LOCK_RETENTION_MS } from '../../src/store/lmdb/retire.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

async function tables(): Promise<Tables> {
  const dir = await mkdtemp(join(tmpdir(), 'fg-housekeeping-'));
  const t = openTables(join(dir, DATA_FILE), 'hk');
  cleanups.push(async () => {
    await t.root.close();
    await rm(dir, { recursive: true, force: true });
  });
  return t;
}

const never = () => false;

describe('embedded store housekeeping', () => {
  it('removes every expired record and no live one, in passes of at most `pass` records', async () => {
    const t = await tables();
    const now = nowMs();
    const n = 2_345;
    await t.root.transaction(() => {
      for (let i = 0; i < n; i++) {
        const expired = i % 3 === 0;
        t.grants.put([`lock:${String(i).padStart(5, '0')}`, `req-${i}`, 'owner'], {
          leaseId: `l${i}`,
          token: String(i + 1),
          ttlMs: 1000,
          expiresAt: now,
          tookOver: false,
          keepUntil: expired ? now - 1 : now + 600_000,
        });
        t.waiters.put(`lock:${i}`, [{ id: `w${i}`, deadline: expired ? now - 1 : now + 600_000 }]);
      }
    });
    let largestPass = 0;
    let inPass = 0;
    const passes = await sweepTable(
      t,
      t.grants,
      (g, at) => {
        inPass += 1;
        largestPass = Math.max(largestPass, inPass);
        return g.keepUntil <= at;
      },
      (key, at) => {
        inPass = 0; // a pass's deletions start once its reading is over
        const g = t.grants.get(key);
        if (g !== undefined && g.keepUntil <= at) t.grants.remove(key);
      },
      never,
      500,
    );
    expect(passes).toBe(Math.ceil(n / 500));
    expect(largestPass).toBeLessThanOrEqual(500);
    const left = [...t.grants.getRange({})].map((e) => Number(e.value.token) - 1);
    expect(left).toHaveLength(n - Math.ceil(n / 3));
    expect(left.every((i) => i % 3 !== 0)).toBe(true);

    await housekeep(t, never, DEFAULT_LOCK_RETENTION_MS, 100);
    const queues = [...t.waiters.getRange({})].map((e) => e.key);
    expect(queues).toHaveLength(n - Math.ceil(n / 3));
    expect(queues.every((k) => Number(k.slice('lock:'.length)) % 3 !== 0)).toBe(true);
  });

  it('sweeps a table whose every record is expired (each pass deleting what the next starts after)', async () => {
    const t = await tables();
    const now = nowMs();
    await t.root.transaction(() => {
      for (let i = 0; i < 1_050; i++) t.waiters.put(`lock:${i}`, [{ id: `w${i}`, deadline: now - 1 }]);
    });
    await housekeep(t, never, DEFAULT_LOCK_RETENTION_MS, 100);
    expect([...t.waiters.getRange({})]).toHaveLength(0);
  });

  it('removes idempotency records whose hold or ttl passed, in flight or done, and no live one', async () => {
    const t = await tables();
    const now = nowMs();
    await t.root.transaction(() => {
      for (let i = 0; i < 250; i++) {
        const until = i % 2 === 0 ? now - 1 : now + 600_000;
        const done = i % 4 < 2;
        t.idempotency.put(`r\nk-${i}`, {
          fingerprint: 'fp',
          attempt: done ? null : `at-${i}`,
          until,
          response: done ? Buffer.from([i & 0xff]) : null,
        });
      }
    });
    await housekeep(t, never, DEFAULT_LOCK_RETENTION_MS, 100);
    const left = [...t.idempotency.getRange({})].map((e) => Number(e.key.slice('r\nk-'.length)));
    expect(left).toHaveLength(125);
    expect(left.every((i) => i % 2 === 1)).toBe(true);
  });

  it('stops between passes once the store closes', async () => {
    const t = await tables();
    const now = nowMs();
    await t.root.transaction(() => {
      for (let i = 0; i < 1_000; i++) t.waiters.put(`lock:${i}`, [{ id: `w${i}`, deadline: now - 1 }]);
    });
    let stop = false;
    const passes = await sweepTable(
      t,
      t.waiters,
      () => true,
      (key) => {
        t.waiters.remove(key);
        stop = true;
      },
      () => stop,
      100,
    );
    expect(passes).toBe(1);
    expect([...t.waiters.getRange({})]).toHaveLength(900);
  });

  it('maps the data file once at MAP_SIZE', async () => {
    const t = await tables();
    expect(MAP_SIZE).toBe(16 * 1024 ** 3);
    expect(t.root.getStats()).toMatchObject({ mapSize: MAP_SIZE });
  });
});
