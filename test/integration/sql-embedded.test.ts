/**
 * What only the embedded (PGlite) store has: one process per directory (the LOCK
 * file), data that survives close and reopen, fsync on commit, exact big tokens.
 * The kill -9 behaviour is in test/fault/embedded-kill9.test.ts.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/errors.js';
import { openEmbeddedStore } from '../../src/store/sql/store.js';
import type { Store } from '../../src/store/types.js';
import { seedEmbeddedIssued } from '../helpers/sql-seed.js';

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

describe('embedded store', { timeout: 90_000 }, () => {
  it('refuses a directory whose LOCK holder is alive, and takes it over once that process died', async () => {
    const dir = await tempDir();
    const holder = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1e6)'], { stdio: 'ignore' });
    cleanups.push(async () => {
      if (holder.exitCode === null && holder.signalCode === null) holder.kill('SIGKILL');
    });
    const pid = holder.pid as number;
    writeFileSync(join(dir, 'LOCK'), `${pid}\n`);

    const err = await openEmbeddedStore(dir).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreUnavailableError);
    const message = (err as Error).message;
    expect(message).toContain(dir);
    expect(message).toContain(String(pid));
    expect(message).not.toContain('\n');
    expect(readFileSync(join(dir, 'LOCK'), 'utf8').trim()).toBe(String(pid));

    holder.kill('SIGKILL');
    await once(holder, 'exit');
    const store = await openEmbeddedStore(dir);
    expect(readFileSync(join(dir, 'LOCK'), 'utf8').trim()).toBe(String(process.pid));
    await store.close();
    expect(existsSync(join(dir, 'LOCK'))).toBe(false);
  });

  it('refuses a second open in the same process', async () => {
    const dir = await tempDir();
    await open(dir);
    await expect(openEmbeddedStore(dir)).rejects.toThrow(/already open in this process/);
  });

  it('takes over an empty LOCK left by a process that died before writing its pid', async () => {
    const dir = await tempDir();
    const lock = join(dir, 'LOCK');
    writeFileSync(lock, '');
    await expect(openEmbeddedStore(dir)).rejects.toThrow(/being opened by another process/);
    const old = new Date(Date.now() - 60_000);
    utimesSync(lock, old, old);
    await open(dir);
    expect(readFileSync(lock, 'utf8').trim()).toBe(String(process.pid));
  });

  it('keeps leases, tokens and the fence across close and reopen', async () => {
    const dir = await tempDir();
    const first = await openEmbeddedStore(dir);
    const a = await first.tryAcquire({ key: 'k', owner: 'o', ttlMs: 60_000, requestId: 'r1' });
    if (!a.ok) throw new Error('expected a grant');
    await first.admit({
      lock: 'k',
      token: a.lease.token,
      check: 'token',
      requestId: 'w',
      session: 's',
      record: true,
    });
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

  it('keeps tokens exact above 2^53 (seeded through a closed directory)', async () => {
    const dir = await tempDir();
    let store = await openEmbeddedStore(dir);
    cleanups.push(() => store.close());
    store = await seedEmbeddedIssued(store, dir, 'big', 2n ** 53n + 1n);
    const r = await store.tryAcquire({ key: 'big', owner: 'o', ttlMs: 1000 });
    expect(r.ok && r.lease.token).toBe(2n ** 53n + 2n);
    expect((await store.inspect('big'))?.issued).toBe(2n ** 53n + 2n);
  });

  it('says in health() that every commit is fsynced', async () => {
    const dir = await tempDir();
    const h = await (await open(dir)).health();
    expect(h).toMatchObject({ ok: true, kind: 'embedded' });
    expect(h.detail).toContain('fsync on every commit');
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
    expect((await store.health()).ok).toBe(false);
  });
});
