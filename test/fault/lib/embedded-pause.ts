/**
 * Stopping a process that shares an embedded store directory, at a moment it holds no
 * write transaction.
 *
 * Every process of the directory takes LMDB's one write lock for each transaction (and
 * lmdb holds it while the callbacks run on the JS thread, docs/stores-embedded.md). A
 * process stopped while it holds the lock stops every writer of the directory until it
 * runs again or dies: that is the store's documented limit, not what a paused-gateway
 * scenario tests. So the test process takes the write lock itself, stops the process
 * while holding it (the process cannot be inside a transaction then), waits until every
 * thread of it is stopped, and lets the lock go.
 */
import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { open } from 'lmdb';
import { DATA_FILE } from '../../../src/store/lmdb/db.js';

const STOP_WAIT_MS = 5_000;
/** Written and removed in the main database, beside the named ones, by the test alone. */
const LOCK_KEY = 'fault-test-pause';

/** True when every thread of `pid` is stopped (state T in /proc). */
function allThreadsStopped(pid: number): boolean {
  const tasks = readdirSync(`/proc/${pid}/task`);
  return tasks.every((tid) => {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    // The state follows the command name, which is in parentheses and may hold spaces.
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state === 'T' || state === 't';
  });
}

/**
 * SIGSTOPs `proc` (a child process, or the pids of several, e.g. a gateway's primary and
 * its workers) while the test holds the write lock of the embedded store in `dir`.
 */
export async function stopOutsideWriteLock(
  dir: string,
  proc: ChildProcess | readonly number[],
): Promise<void> {
  const pids = Array.isArray(proc) ? proc : [(proc as ChildProcess).pid];
  if (pids.some((pid) => pid === undefined)) throw new Error('stopOutsideWriteLock: the process has no pid');
  const env = open({ path: join(dir, DATA_FILE), compression: false });
  try {
    env.transactionSync(() => {
      // lmdb takes the lock at a transaction's first write; this one leaves nothing behind.
      env.put(LOCK_KEY, 1);
      env.remove(LOCK_KEY);
      for (const pid of pids) process.kill(pid as number, 'SIGSTOP');
      const end = Date.now() + STOP_WAIT_MS;
      for (const pid of pids as number[]) {
        while (!allThreadsStopped(pid)) {
          if (Date.now() > end) throw new Error(`process ${pid} did not stop within ${STOP_WAIT_MS} ms`);
        }
      }
    });
  } finally {
    await env.close();
  }
}
