/**
 * What `fencegate serve --workers 2` says while it starts (docs/observability.md,
 * "Lifecycle lines"): that it waits for its workers (while /readyz answers 503), then
 * that they are ready, before the listening line; a sequencer key file it made is a
 * notice at info, not a warning.
 */
import { rm } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';

let dir: string;
let fg: FencegateProcess;

beforeAll(async () => {
  dir = await tempDir('fg-lifecycle-');
  fg = await startFencegate([
    '--workers',
    '2',
    '--store',
    dir,
    '--log-level',
    'info',
    '--log-format',
    'json',
  ]);
}, 180_000);
afterAll(async () => {
  await fg?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('serve --workers 2: lifecycle lines', () => {
  it('says it waits for 2 workers, then that they are ready, then listening', () => {
    const msgs = fg.logs().map((l) => l.msg);
    const waiting = msgs.findIndex((m) => m.startsWith('waiting for 2 workers to start'));
    const ready = msgs.findIndex((m) => m.startsWith('workers ready: 2 processes'));
    const listening = msgs.findIndex((m) => m.startsWith('listening data='));
    expect(waiting).toBeGreaterThanOrEqual(0);
    expect(ready).toBeGreaterThan(waiting);
    expect(listening).toBeGreaterThan(ready);
    for (const i of [waiting, ready]) expect(fg.logs()[i]).toMatchObject({ level: 30, workers: 2 });
  });

  it('logs the sequencer key file it made at info', () => {
    const made = fg.logs().filter((l) => l.msg.startsWith('sequencer keys: made '));
    expect(made.map((l) => l.level)).toEqual([30]);
  });

  it('logs no probe at info', async () => {
    expect((await fetch(`${fg.control}/readyz`)).status).toBe(200);
    expect(fg.logs().filter((l) => l.msg === 'request' && l.path === '/readyz' && l.level >= 30)).toEqual([]);
  });
});
