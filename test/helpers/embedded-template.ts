/**
 * A fresh embedded-store directory for a test, fast: PGlite's initdb costs seconds
 * (tens under load), so each test process initialises one template directory once
 * and every test gets a copy of it. The copy is a real, closed data directory, so the
 * store under test still runs its own open and schema checks on it.
 */
import { rmSync } from 'node:fs';
import { cp, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedStore } from '../../src/store/sql/store.js';

let template: Promise<string> | null = null;

function makeTemplate(): Promise<string> {
  template ??= (async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fg-embedded-template-'));
    const store = await openEmbeddedStore(dir);
    await store.close();
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    return dir;
  })();
  return template;
}

/** A new directory holding an initialised, closed embedded store. */
export async function freshEmbeddedDir(prefix = 'fg-embedded-'): Promise<string> {
  const source = await makeTemplate();
  const dir = await mkdtemp(join(tmpdir(), prefix));
  await cp(source, dir, { recursive: true });
  return dir;
}
