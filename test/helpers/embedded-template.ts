/**
 * A fresh, empty directory for an embedded store under test (the store creates its
 * files on open, in milliseconds).
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function freshEmbeddedDir(prefix = 'fg-embedded-'): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}
