/** Small file-system questions shared by the policy holder and `fencegate init`. */
import { lstat } from 'node:fs/promises';

/** Whether anything (a file, a directory, even a dangling symlink) is at `path`. */
export async function pathExists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}
