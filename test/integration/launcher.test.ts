/**
 * The installed `fencegate` command (bin/fencegate.js run as a program) starts Node with
 * the heap settings of ADR 0004: `compact` (the default) or `fast` (FENCEGATE_HEAP), a
 * semi-space already in NODE_OPTIONS left alone, the garbage collector single-threaded
 * on 2 CPUs or fewer (FENCEGATE_GC), no allocation-site pretenuring, and an unknown value
 * refused with a message. The flags are read back from the started process's own execArgv.
 */
import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const BIN = fileURLToPath(new URL('../../bin/fencegate.js', import.meta.url));
/** Always on (ADR 0004, addendum 3): pretenured request objects kept whole requests alive. */
const NO_PRETENURING = '--no-allocation-site-pretenuring';
const SHOW =
  "--import=data:text/javascript,process.stderr.write('argv='+JSON.stringify(process.execArgv)+'\\n')";

/** Runs the command; the heap cases pin FENCEGATE_GC so that the machine's CPU count does not matter. */
function run(env: Record<string, string>): { status: number | null; argv: string[] | null; stderr: string } {
  const r = spawnSync(BIN, ['--version'], {
    env: { ...process.env, NODE_OPTIONS: SHOW, FENCEGATE_GC: 'parallel', ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
  const m = /^argv=(.*)$/m.exec(r.stderr);
  return {
    status: r.status,
    argv: m?.[1] === undefined ? null : (JSON.parse(m[1]) as string[]),
    stderr: r.stderr,
  };
}

describe('the fencegate command', () => {
  it('starts Node with 8 MiB semi-spaces and the old generation collected at a 20 % growth by default', () => {
    const compact = ['--max-semi-space-size=8', '--heap-growing-percent=20', NO_PRETENURING];
    expect(run({}).argv).toEqual(compact);
    expect(run({ FENCEGATE_HEAP: 'compact' }).argv).toEqual(compact);
  });

  it('starts the larger heap with FENCEGATE_HEAP=fast', () => {
    expect(run({ FENCEGATE_HEAP: 'fast' }).argv).toEqual([
      '--max-semi-space-size=32',
      '--heap-growing-percent=100',
      NO_PRETENURING,
    ]);
  });

  it('leaves a semi-space set in NODE_OPTIONS alone', () => {
    const r = run({ NODE_OPTIONS: `${SHOW} --max-semi-space-size=16` });
    expect(r.argv).toEqual(['--heap-growing-percent=20', NO_PRETENURING]);
  });

  it('runs the garbage collector on the main thread alone on 2 CPUs or fewer, or when told to', () => {
    const heap = ['--max-semi-space-size=8', '--heap-growing-percent=20', NO_PRETENURING];
    const byDefault = run({ FENCEGATE_GC: '' }).argv;
    if (availableParallelism() <= 2) expect(byDefault).toEqual([...heap, '--single-threaded-gc']);
    else expect(byDefault).toEqual(heap);
    expect(run({ FENCEGATE_GC: 'single' }).argv).toEqual([...heap, '--single-threaded-gc']);
    expect(run({ FENCEGATE_GC: 'parallel' }).argv).toEqual(heap);
  });

  it('refuses an unknown FENCEGATE_GC with a message naming it', () => {
    const r = run({ FENCEGATE_GC: 'many' });
    expect(r.status).toBe(2);
    expect(r.argv).toBeNull();
    expect(r.stderr).toContain("FENCEGATE_GC must be single or parallel, not 'many'");
  });

  it('refuses an unknown FENCEGATE_HEAP with a message naming it', () => {
    const r = run({ FENCEGATE_HEAP: 'tiny' });
    expect(r.status).toBe(2);
    expect(r.argv).toBeNull();
    expect(r.stderr).toContain("FENCEGATE_HEAP must be fast or compact, not 'tiny'");
  });
});
