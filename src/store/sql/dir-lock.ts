/**
 * One process per embedded store directory. PGlite has no inter-process locking
 * and two processes writing one data directory would corrupt it, so the store
 * takes `dir/LOCK` (created with O_EXCL, holding the owner's pid) before opening
 * PGlite, and removes it on close.
 *
 * A LOCK left behind by a process that died (kill -9, crash, exit without close)
 * is taken over when its pid no longer exists (`process.kill(pid, 0)` → ESRCH).
 * Takeovers are serialised by a short-lived `LOCK.takeover` (also O_EXCL), so two
 * processes that find the same stale lock cannot both win.
 *
 * Limit: if the dead owner's pid has been reused by an unrelated live process,
 * the lock is (wrongly, but safely) refused; the error names the pid, and
 * removing the file by hand after checking fixes it.
 */
import { closeSync, fsyncSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { StoreUnavailableError } from '../../errors.js';
import { errorCode } from './driver.js';

/** An empty or unreadable LOCK younger than this may be an owner between create and write. */
const FRESH_MS = 5000;
/** A takeover marker older than this belongs to a process that died while taking over. */
const TAKEOVER_STALE_MS = 10_000;

export interface DirLock {
  readonly path: string;
  release(): void;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the process exists but belongs to someone else.
    return errorCode(err) !== 'ESRCH';
  }
}

function readPid(path: string): number | null {
  try {
    const text = readFileSync(path, 'utf8').trim();
    return /^[1-9][0-9]*$/.test(text) ? Number(text) : null;
  } catch {
    return null;
  }
}

function ageMs(path: string): number {
  try {
    return Date.now() - statSync(path).mtimeMs;
  } catch {
    return 0;
  }
}

/** Creates `path` exclusively with our pid; false if it exists. */
function createExclusive(path: string): boolean {
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o644);
  } catch (err) {
    if (errorCode(err) === 'EEXIST') return false;
    throw err;
  }
  try {
    writeSync(fd, `${process.pid}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return true;
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch (err) {
    if (errorCode(err) !== 'ENOENT') throw err;
  }
}

function refuse(dir: string, why: string): never {
  throw new StoreUnavailableError(`embedded store ${dir} is ${why}`);
}

/** Takes the directory's LOCK or throws StoreUnavailableError naming the directory and the owner's pid. */
export function lockDirectory(dir: string): DirLock {
  const path = join(dir, 'LOCK');
  const takeover = `${path}.takeover`;
  try {
    for (let attempt = 0; attempt < 5; attempt++) {
      if (createExclusive(path)) return held(path);
      const pid = readPid(path);
      if (pid === null) {
        if (ageMs(path) < FRESH_MS) refuse(dir, `being opened by another process (${path} has no pid yet)`);
      } else if (pid === process.pid) {
        refuse(dir, `already open in this process (pid ${pid})`);
      } else if (pidAlive(pid)) {
        refuse(dir, `in use by process ${pid} (${path}); only one process may open it`);
      }
      // Stale: its owner is gone. Take it over under the takeover marker.
      if (!createExclusive(takeover)) {
        if (ageMs(takeover) > TAKEOVER_STALE_MS) unlinkQuietly(takeover);
        else refuse(dir, 'being taken over by another process; retry');
        continue;
      }
      try {
        if (readPid(path) === pid) unlinkQuietly(path); // still the stale owner we judged
      } finally {
        unlinkQuietly(takeover);
      }
    }
  } catch (err) {
    if (err instanceof StoreUnavailableError) throw err;
    throw new StoreUnavailableError(
      `embedded store ${dir}: cannot take ${path}: ${errorCode(err) ?? 'error'}`,
      {
        cause: err,
      },
    );
  }
  refuse(dir, `locked (${path}); could not take it over`);
}

function held(path: string): DirLock {
  let released = false;
  return {
    path,
    release(): void {
      if (released) return;
      released = true;
      // Only remove the file if it is still ours.
      if (readPid(path) === process.pid) unlinkQuietly(path);
    },
  };
}
