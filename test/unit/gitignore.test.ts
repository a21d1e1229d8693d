/** `npm pack` leaves fencegate-<version>.tgz in the tree: git ignores it. */
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/procs.js';

describe('.gitignore', () => {
  it('ignores the tarball npm pack writes', () => {
    const out = execFileSync('git', ['check-ignore', '-v', 'fencegate-0.1.0.tgz'], { cwd: ROOT }).toString();
    expect(out).toMatch(/^\.gitignore:\d+:\*\.tgz\s+fencegate-0\.1\.0\.tgz$/m);
  });
});
