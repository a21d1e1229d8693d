/**
 * What only the embedded (LMDB) store has: several handles and processes on one
 * directory sharing locks, fences and wake-ups; data that survives close and
 * reopen; fsync on commit; exact big tokens; a clear refusal of a directory left by
 * the older PGlite store. The kill -9 behaviour is in test/fault/embedded-kill9.test.ts.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { openEmbeddedStore } from '../../src/store/lmdb/store.js';
import type { Store } from '../../src/store/types.js';
import { seedEmbeddedIssued } from '../helpers/embedded-seed.js';
import { sleep } from '../helpers/wait.js';

const BUILT = fileURLToPath(new URL('../../dist/store/lmdb/store.js', import.meta.url));
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()?.();
});

async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'fg-embedded-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function open(dir: string): Promise<Store> {
  const store = await openEmbeddedStore(dir);
  cleanups.push(() => store.close());
  return store;
}

/** Resolves on the listener's next call. */
function nextWake(store: Store, key: string): Promise<void> {
  return new Promise((resolve, reject) => {
    store.watch(key, () => resolve()).catch(reject);
  });
}

const base = { check: 'token' as const, record: true };

describe('embedded store', { timeout: 90_000 }, () => {
  it('two stores on one directory share tokens, the fence and the drain barrier, and wake each other', async () => {
    const dir = await tempDir();
    const a = await open(dir);
    const b = await open(dir);
    await a.openSession('sa', 60_000);
    const g1 = await a.tryAcquire({ key: 'k', owner: 'o1', ttlMs: 60_000 });
    if (!g1.ok) throw new Error('expected a grant');
    expect(await b.tryAcquire({ key: 'k', owner: 'o2', ttlMs: 60_000 })).toMatchObject({
      ok: false,
      reason: 'held',
    });

    // b waits for the release that a makes.
    const released = nextWake(b, 'k');
    await sleep(10); // let the watch register
    expect(await a.release('k', g1.lease.leaseId)).toEqual({ ok: true });
    await released;
    const g2 = await b.tryAcquire({ key: 'k', owner: 'o2', ttlMs: 60_000 });
    if (!g2.ok) throw new Error('expected a grant');
    expect(g2.lease.token).toBe(g1.lease.token + 1n);

    // The drain barrier across handles: a's in-flight write holds b's higher one until it finishes.
    expect(
      await a.admit({ ...base, lock: 'k', token: g1.lease.token, requestId: 'w1', session: 'sa' }),
    ).toMatchObject({ ok: true });
    await b.openSession('sb', 60_000);
    expect(
      await b.admit({ ...base, lock: 'k', token: g2.lease.token, requestId: 'w2', session: 'sb' }),
    ).toMatchObject({
      ok: true,
      lowerInflight: 1,
    });
    expect(
      await a.admit({ ...base, lock: 'k', token: g1.lease.token, requestId: 'w3', session: 'sa' }),
    ).toMatchObject({
      ok: false,
      reason: 'stale',
      highest: g2.lease.token,
    });
    const drained = nextWake(b, 'k');
    await a.finish('k', 'w1');
    await drained;
    expect(await b.lowerInflight('k', g2.lease.token)).toEqual({ count: 0, sessions: [], bounds: [] });
  });

  it('wakes a watcher in another process, and goes on when that process is killed', async () => {
    expect(existsSync(BUILT), `${BUILT} is missing: run npm run build first`).toBe(true);
    const dir = await tempDir();
    const store = await open(dir);
    const g = await store.tryAcquire({ key: 'x', owner: 'o', ttlMs: 60_000 });
    if (!g.ok) throw new Error('expected a grant');
    const script = `
      const { openEmbeddedStore } = await import(${JSON.stringify(BUILT)});
      const s = await openEmbeddedStore(${JSON.stringify(dir)});
      await s.watch('x', () => console.log('woken'));
      console.log('watching');
      setInterval(() => {}, 1e6);`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    cleanups.push(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    let out = '';
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const seen = (word: string) =>
      new Promise<void>((resolve, reject) => {
        const check = () => out.includes(word) && resolve();
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          check();
        });
        child.once('exit', () => reject(new Error(`child exited: ${err}`)));
        check();
      });
    await seen('watching');
    expect(await store.release('x', g.lease.leaseId)).toEqual({ ok: true });
    await seen('woken');

    child.kill('SIGKILL');
    await once(child, 'exit');
    // Its registration and socket are left behind: a new store opens and works regardless.
    const again = await open(dir);
    expect(await again.tryAcquire({ key: 'x', owner: 'o', ttlMs: 1000 })).toMatchObject({ ok: true });
    const woken = nextWake(store, 'x');
    const cur = await again.inspect('x');
    if (!cur?.leaseId) throw new Error('expected a lease');
    await again.release('x', cur.leaseId);
    await woken;
    // The dead process's socket was removed by whoever found it gone.
    const sockets = await readdir(join(dir, 'wake'));
    expect(sockets.some((s) => s.startsWith(`${child.pid}-`))).toBe(false);
  });

  it('wakes across handles when the directory is too deep for a Unix socket path beside it', async () => {
    const dir = join(await tempDir(), 'd'.repeat(60), 'e'.repeat(60));
    const a = await open(dir);
    const b = await open(dir);
    const g = await a.tryAcquire({ key: 'deep', owner: 'o', ttlMs: 60_000 });
    if (!g.ok) throw new Error('expected a grant');
    const woken = nextWake(b, 'deep');
    await a.release('deep', g.lease.leaseId);
    await woken;
  });

  it('pages the lock list in UTF-8 byte order, where it differs from JS string order', async () => {
    const store = await open(await tempDir());
    // U+E000 sorts after U+1F600 in JS (UTF-16 units) but before it in bytes (EE… < F0…).
    const keys = ['p:\uE000', 'p:\u{1F600}', 'p:a'];
    for (const key of keys) await store.tryAcquire({ key, owner: 'o', ttlMs: 60_000 });
    const seen: string[] = [];
    let after: string | null = null;
    do {
      const page = await store.listLocks({ limit: 1, prefix: 'p:', after });
      seen.push(...page.locks.map((l) => l.key));
      after = page.next;
    } while (after !== null && seen.length < 10);
    expect(seen).toEqual(['p:a', 'p:\uE000', 'p:\u{1F600}']);
  });

  it('keeps namespaces of one directory apart', async () => {
    const dir = await tempDir();
    const a = await openEmbeddedStore(dir, { namespace: 'team-a' });
    cleanups.push(() => a.close());
    const b = await openEmbeddedStore(dir, { namespace: 'team_b' });
    cleanups.push(() => b.close());
    const g = await a.tryAcquire({ key: 'shared-name', owner: 'o', ttlMs: 60_000 });
    expect(g.ok).toBe(true);
    expect(await b.inspect('shared-name')).toBeNull();
    expect(await b.tryAcquire({ key: 'shared-name', owner: 'o', ttlMs: 60_000 })).toMatchObject({ ok: true });
    expect((await a.health()).epoch?.id).not.toBe((await b.health()).epoch?.id);
    await expect(openEmbeddedStore(dir, { namespace: 'pg_x' })).rejects.toThrow(/namespace/);
  });

  it('refuses, in one line, a directory that holds the older PGlite store', async () => {
    const dir = await tempDir();
    mkdirSync(join(dir, 'pgdata'));
    const err = await openEmbeddedStore(dir).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreUnavailableError);
    const message = (err as Error).message;
    expect(message).toContain(join(dir, 'pgdata'));
    expect(message).toContain('docs/stores-embedded.md');
    expect(message).not.toContain('\n');
  });

  it('keeps leases, tokens and the fence across close and reopen', async () => {
    const dir = await tempDir();
    const first = await openEmbeddedStore(dir);
    const a = await first.tryAcquire({ key: 'k', owner: 'o', ttlMs: 60_000, requestId: 'r1' });
    if (!a.ok) throw new Error('expected a grant');
    await first.admit({ ...base, lock: 'k', token: a.lease.token, requestId: 'w', session: 's' });
    const epoch = (await first.health()).epoch;
    await first.close();

    const second = await open(dir);
    expect(await second.inspect('k')).toMatchObject({
      held: true,
      leaseId: a.lease.leaseId,
      token: a.lease.token,
      highest: a.lease.token,
    });
    expect((await second.health()).epoch).toEqual(epoch);
    const replay = await second.tryAcquire({ key: 'k', owner: 'o', ttlMs: 60_000, requestId: 'r1' });
    expect(replay).toMatchObject({ ok: true, replayed: true, lease: { leaseId: a.lease.leaseId } });
    await second.release('k', a.lease.leaseId);
    const b = await second.tryAcquire({ key: 'k', owner: 'o', ttlMs: 1000 });
    expect(b.ok && b.lease.token).toBe(a.lease.token + 1n);
  });

  it('keeps tokens exact above 2^53, and refuses to mint past 2^63-1', async () => {
    const dir = await tempDir();
    const store = await open(dir);
    await seedEmbeddedIssued(dir, 'big', 2n ** 53n + 1n);
    const r = await store.tryAcquire({ key: 'big', owner: 'o', ttlMs: 1000 });
    expect(r.ok && r.lease.token).toBe(2n ** 53n + 2n);
    expect((await store.inspect('big'))?.issued).toBe(2n ** 53n + 2n);
    await seedEmbeddedIssued(dir, 'last', 2n ** 63n - 1n);
    expect(await store.tryAcquire({ key: 'last', owner: 'o', ttlMs: 1000 })).toEqual({
      ok: false,
      reason: 'exhausted',
    });
  });

  it('says in health() that every commit is fsynced', async () => {
    const dir = await tempDir();
    const h = await (await open(dir)).health();
    expect(h).toMatchObject({ ok: true, kind: 'embedded' });
    expect(h.detail).toContain('fsync');
    expect(h.detail).toContain(dir);
  });

  it('fails with StoreUnavailableError when the directory cannot be created', async () => {
    const dir = await tempDir();
    const file = join(dir, 'file');
    writeFileSync(file, 'x');
    await expect(openEmbeddedStore(join(file, 'sub'))).rejects.toBeInstanceOf(StoreUnavailableError);
  });

  it('operations after close throw StoreUnavailableError', async () => {
    const dir = await tempDir();
    const store = await openEmbeddedStore(dir);
    await store.close();
    await expect(store.now()).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(
      store.admit({ ...base, lock: 'k', token: 1n, requestId: 'r', session: 's' }),
    ).rejects.toBeInstanceOf(StoreUnavailableError);
    expect((await store.health()).ok).toBe(false);
  });
});
