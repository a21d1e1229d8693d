/**
 * The embedded store's disk-fault pieces (src/store/lmdb/disk.ts) on their own: which
 * errors count as the disk refusing a write and what /readyz will call them, the cause
 * behind lmdb's "Commit failed", and the process-wide guard, which must swallow lmdb's
 * unreachable commit rejections and nothing else: any other unhandled rejection still
 * ends the process, as Node's default does. The guard runs in child processes (its
 * listener is process-wide), from the build: `npm run build` first.
 * The whole path on a real full disk: test/fault/disk-full.test.ts.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { commitCause, diskFault, isCommitRejection } from '../../src/store/lmdb/disk.js';

const BUILT = fileURLToPath(new URL('../../dist/store/lmdb/disk.js', import.meta.url));

function errno(message: string, code: number | string): Error {
  return Object.assign(new Error(message), { code });
}

/** lmdb's shape: "Commit failed", its commitError a promise rejected with the cause. */
function commitRejection(cause: Error): Error {
  const commitError = Promise.reject(cause);
  commitError.catch(() => undefined);
  return Object.assign(new Error('Commit failed (see commitError for details)'), { commitError });
}

describe('disk faults', () => {
  it('names the errors of a disk that refuses writes, by number (lmdb) or by name (fs)', () => {
    expect(diskFault(errno('No space left on device: Attempting to write page', 28))).toEqual({
      code: 'ENOSPC',
      reason: 'disk full: ENOSPC',
      message: 'No space left on device: Attempting to write page',
    });
    expect(diskFault(errno('Read-only file system', 30))?.reason).toBe('disk read-only: EROFS');
    expect(diskFault(errno('Input/output error', 5))?.reason).toBe('disk I/O error: EIO');
    expect(diskFault(errno('MDB_MAP_FULL: Environment mapsize limit reached', -30792))?.reason).toBe(
      'store map full: MDB_MAP_FULL',
    );
    expect(diskFault(errno('ENOSPC: no space left on device, write', 'ENOSPC'))?.code).toBe('ENOSPC');
    // Not the disk: no fault, the store reports them as they are.
    expect(diskFault(errno('Permission denied', 13))).toBeNull();
    expect(diskFault(new Error('The database has been closed'))).toBeNull();
    expect(diskFault('ENOSPC')).toBeNull();
  });

  it('finds the cause behind lmdb\'s "Commit failed", and leaves other errors as they are', async () => {
    const cause = errno('No space left on device', 28);
    const failed = commitRejection(cause);
    expect(isCommitRejection(failed)).toBe(true);
    expect(await commitCause(failed)).toBe(cause);
    const plain = new Error('plain');
    expect(isCommitRejection(plain)).toBe(false);
    expect(await commitCause(plain)).toBe(plain);
  });
});

async function runGuarded(body: string): Promise<{ code: number | null; stderr: string; stdout: string }> {
  const script = `
    import { guardCommitRejections } from ${JSON.stringify(BUILT)};
    guardCommitRejections();
    ${body}
    setTimeout(() => console.log('still running'), 100);
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stdout, stderr };
}

describe('the unhandled-rejection guard', () => {
  it("handles lmdb's unreachable commit rejections: the process goes on", async () => {
    expect(existsSync(BUILT), `${BUILT} is missing: run npm run build first`).toBe(true);
    const r = await runGuarded(`
      // In lmdb's order: the writes' promises rejected first, then their commitError.
      const cause = Object.assign(new Error('No space left on device'), { code: 28 });
      let rejectCause;
      const commitError = new Promise((_, reject) => (rejectCause = reject));
      Promise.reject(Object.assign(new Error('Commit failed (see commitError for details)'), { commitError }));
      rejectCause(cause);
    `);
    expect(r, r.stderr).toMatchObject({ code: 0, stdout: 'still running\n' });
  });

  it('lets every other unhandled rejection end the process, as Node does without it', async () => {
    const r = await runGuarded(`Promise.reject(new Error('a bug elsewhere'));`);
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('a bug elsewhere');
    // A numbered error that is not lmdb's own is not swallowed either.
    const errnoElsewhere = await runGuarded(
      `Promise.reject(Object.assign(new Error('ENOSPC elsewhere'), { code: 28 }));`,
    );
    expect(errnoElsewhere.code).not.toBe(0);
    expect(errnoElsewhere.stderr).toContain('ENOSPC elsewhere');
  });
});
