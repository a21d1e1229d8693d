/**
 * Disk faults of the embedded store: a full, read-only or failing disk under the LMDB
 * data file. LMDB reports a commit it could not write by rejecting every write promise
 * of that commit with "Commit failed", whose `commitError` is a second promise rejected
 * with the cause (the errno, e.g. 28 ENOSPC). lmdb also rejects promises of its own that
 * nothing outside it can reach (the event-turn batch's commit promise, that
 * `commitError`): left alone, Node turns them into an uncaught exception and `serve`
 * exits, taking reads, unfenced routes, the issuer and /readyz down with the fenced
 * writes. guardCommitRejections marks exactly those as handled (the store has already
 * answered every caller of the commit with a StoreUnavailableError); every other
 * unhandled rejection still ends the process as Node's default does. A disk fault is an
 * outage of writes, not of the process: docs/stores-embedded.md, "Full or read-only disk".
 */
import { constants } from 'node:os';

/** LMDB's own code for a data file that reached its map size (lmdb-js grows the map, so rare). */
const MDB_MAP_FULL = -30792;

/** The errors that mean the disk (not the data) refused a write, with what operators read. */
const DISK_ERRORS: Record<string, string> = {
  ENOSPC: 'disk full',
  EDQUOT: 'disk quota exceeded',
  EROFS: 'disk read-only',
  EIO: 'disk I/O error',
  MDB_MAP_FULL: 'store map full',
};

const ERRNO_NAMES = new Map<number, string>([
  ...Object.entries(constants.errno).map(([name, n]): [number, string] => [n, name]),
  [MDB_MAP_FULL, 'MDB_MAP_FULL'],
]);

/** A disk fault: its code (ENOSPC …), the reason /readyz shows ("disk full: ENOSPC") and lmdb's message. */
export interface DiskFault {
  code: string;
  reason: string;
  message: string;
}

type CommitRejection = Error & { commitError: Promise<unknown> };

/** lmdb's rejection of a write whose commit failed ("Commit failed (see commitError for details)"). */
export function isCommitRejection(err: unknown): err is CommitRejection {
  const c = err instanceof Error ? (err as { commitError?: unknown }).commitError : undefined;
  return typeof (c as { then?: unknown } | undefined)?.then === 'function';
}

/** An error raised by lmdb's write thread (a numeric status, thrown from lmdb's own code). */
function isLmdbWriteError(err: unknown): boolean {
  return (
    err instanceof Error &&
    typeof (err as { code?: unknown }).code === 'number' &&
    /[\\/]lmdb[\\/]/.test(err.stack ?? '')
  );
}

/** What made a commit fail: the cause behind lmdb's "Commit failed", else `err` itself. */
export async function commitCause(err: unknown): Promise<unknown> {
  if (!isCommitRejection(err)) return err;
  return err.commitError.then(
    () => err,
    (cause: unknown) => cause,
  );
}

/** The disk fault `cause` stands for, or null when it is not one (a bug, a closed store …). */
export function diskFault(cause: unknown): DiskFault | null {
  if (!(cause instanceof Error)) return null;
  const raw = (cause as { code?: unknown }).code;
  const code = typeof raw === 'number' ? ERRNO_NAMES.get(raw) : typeof raw === 'string' ? raw : undefined;
  if (code === undefined) return null;
  const what = DISK_ERRORS[code];
  if (what === undefined) return null;
  return { code, reason: `${what}: ${code}`, message: cause.message.split('\n')[0] ?? '' };
}

let guarded = false;

/**
 * Once per process: lmdb's unreachable commit rejections (see above) are handled here.
 * Any other unhandled rejection is thrown again, as Node does when no listener is set,
 * unless another listener (a test runner's) takes care of it.
 */
export function guardCommitRejections(): void {
  if (guarded) return;
  guarded = true;
  // A commitError seen behind a "Commit failed": Node reports it even when a handler was
  // attached while the rejections of the same turn were being reported.
  const causes = new WeakSet<Promise<unknown>>();
  process.on('unhandledRejection', (reason, promise) => {
    if (isCommitRejection(reason)) {
      causes.add(reason.commitError);
      reason.commitError.catch(() => undefined);
      return;
    }
    if (causes.has(promise) || isLmdbWriteError(reason)) return;
    if (process.listenerCount('unhandledRejection') > 1) return;
    throw reason;
  });
}
