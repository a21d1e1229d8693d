/**
 * A wall clock we can move: libfaketime (Debian package `faketime`) preloaded into a
 * child process, reading its offset from a file we rewrite (`+0`, `+1h`, `-2h`, …).
 * The monotonic clock is left alone (FAKETIME_DONT_FAKE_MONOTONIC=1): Node's timers and
 * performance.now() run on it, so only Date.now()/new Date() jump. That is exactly the
 * clock a machine's NTP step or an operator's `date -s` moves.
 */
import { existsSync } from 'node:fs';
import { chmod, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir } from '../../helpers/procs.js';

const CANDIDATES = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/faketime/libfaketime.so.1',
];

export function libfaketime(): string {
  const found = CANDIDATES.find((p) => existsSync(p));
  if (!found) throw new Error('libfaketime not found: apt-get install faketime');
  return found;
}

export interface FakeClock {
  /** Environment for a child process whose wall clock follows this file. */
  env: NodeJS.ProcessEnv;
  /** Set the offset, in libfaketime's relative syntax: "+0", "+1h", "-90m", "+30s". */
  set(offset: string): Promise<void>;
  close(): Promise<void>;
}

export async function fakeClock(initial = '+0'): Promise<FakeClock> {
  const dir = await tempDir('fg-faketime-');
  const file = join(dir, 'offset');
  await writeFile(file, `${initial}\n`);
  // Readable by servers that drop root (Postgres runs as the postgres user).
  await chmod(dir, 0o755);
  await chmod(file, 0o644);
  return {
    env: {
      LD_PRELOAD: libfaketime(),
      FAKETIME_TIMESTAMP_FILE: file,
      FAKETIME_NO_CACHE: '1',
      FAKETIME_DONT_FAKE_MONOTONIC: '1',
    },
    async set(offset) {
      await writeFile(file, `${offset}\n`);
    },
    async close() {
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The wall clock of a server, from the Date header of its answer (whole seconds), minus ours. */
export async function clockOffsetOf(url: string): Promise<number> {
  const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  await res.arrayBuffer();
  const date = res.headers.get('date');
  if (!date) throw new Error(`${url} sent no Date header`);
  return Date.parse(date) - Date.now();
}
