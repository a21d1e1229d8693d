/**
 * kill -9 of a process using the embedded (LMDB) store, at random moments in
 * the middle of its writes: every grant it acknowledged survives, no token is
 * ever minted twice, the fence never moves back, and the directory reopens (the
 * dead process's LOCK is taken over). Runs the built code in child processes:
 * `npm run build` first (npm test and test:fault do).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { sleep } from '../helpers/wait.js';

const CHILD = fileURLToPath(new URL('../helpers/sql-kill9-child.mjs', import.meta.url));
const BUILT = fileURLToPath(new URL('../../dist/store/lmdb/store.js', import.meta.url));
const ROUNDS = 6;

interface Line {
  event: 'open' | 'replay' | 'grant' | 'admitted' | 'released';
  token?: string | null;
  leaseId?: string | null;
  requestId?: string;
  ok?: boolean;
  replayed?: boolean;
  reason?: string | null;
  state?: {
    held: boolean;
    leaseId: string | null;
    token: string;
    issued: string;
    highest: string | null;
  } | null;
}

interface Run {
  child: ChildProcess;
  lines: Line[];
  /** Resolves when a line matching `pred` arrives (or rejects when the child exits first). */
  waitFor(pred: (l: Line) => boolean, timeoutMs: number): Promise<Line>;
  stderr: () => string;
}

const children: ChildProcess[] = [];
let dir = '';
afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  if (dir) await rm(dir, { recursive: true, force: true });
});

function start(args: string[]): Run {
  const child = spawn(process.execPath, [CHILD, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  const lines: Line[] = [];
  let err = '';
  const waiters: { pred: (l: Line) => boolean; resolve: (l: Line) => void }[] = [];
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on('line', (text) => {
    const line = JSON.parse(text) as Line;
    lines.push(line);
    for (const w of [...waiters]) if (w.pred(line)) w.resolve(line);
  });
  return {
    child,
    lines,
    stderr: () => err,
    waitFor(pred, timeoutMs) {
      const found = lines.find(pred);
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`child: no matching line in ${timeoutMs} ms; stderr: ${err}`)),
          timeoutMs,
        );
        child.once('exit', () =>
          setTimeout(() => reject(new Error(`child exited early; stderr: ${err}`)), 50),
        );
        waiters.push({
          pred,
          resolve: (l) => {
            clearTimeout(timer);
            resolve(l);
          },
        });
      });
    },
  };
}

async function kill9(run: Run): Promise<void> {
  run.child.kill('SIGKILL');
  if (run.child.exitCode === null && run.child.signalCode === null) await once(run.child, 'exit');
  // Let readline deliver what was written before the kill.
  await sleep(20);
}

describe('kill -9 on the embedded store', () => {
  it('loses no acknowledged grant and reuses no token across crashes', async () => {
    expect(existsSync(BUILT), `${BUILT} is missing: run npm run build first`).toBe(true);
    dir = await mkdtemp(join(tmpdir(), 'fg-kill9-sql-'));
    let maxAcked = 0n; // highest token any child acknowledged
    let maxAdmitted = 0n; // highest token acknowledged as admitted (the fence)
    let lastGrant: Line | null = null; // the last acknowledged grant
    let lastReleased = false; // whether its release was acknowledged
    let grantsTotal = 0;

    for (let round = 0; round <= ROUNDS; round++) {
      const run = start(lastGrant?.requestId ? [dir, lastGrant.requestId] : [dir]);
      const opened = await run.waitFor((l) => l.event === 'open', 60_000);

      if (round > 0) {
        // Every acknowledged grant is still there: nothing below what was acknowledged.
        const state = opened.state;
        expect(state, 'the lock vanished after kill -9').toBeTruthy();
        expect(BigInt(state?.issued ?? '0')).toBeGreaterThanOrEqual(maxAcked);
        if (maxAdmitted > 0n) expect(BigInt(state?.highest ?? '0')).toBeGreaterThanOrEqual(maxAdmitted);
        // The live lease is the last acknowledged one (unless its release was acknowledged), or a
        // later grant that committed but was killed before it was acknowledged (then its token is
        // above every acknowledged one), or none.
        if (state?.leaseId && state.leaseId === lastGrant?.leaseId) expect(lastReleased).toBe(false);
        else if (state?.leaseId) expect(BigInt(state.token)).toBeGreaterThan(maxAcked);
        // Replaying the last acknowledged request gives the same grant while it is still the
        // live lease, else says it ended; never a new grant.
        const replay = await run.waitFor((l) => l.event === 'replay', 10_000);
        const current = state?.held === true && state.leaseId === lastGrant?.leaseId;
        expect(replay).toMatchObject({
          ...(current ? { ok: true, replayed: true } : { ok: false, reason: 'replay-ended' }),
          token: lastGrant?.token,
          leaseId: lastGrant?.leaseId,
        });
      }
      if (round === ROUNDS) {
        await run.waitFor((l) => l.event === 'grant', 10_000);
        const first = run.lines.find((l) => l.event === 'grant');
        expect(BigInt(first?.token ?? '0')).toBeGreaterThan(maxAcked);
        await kill9(run);
        break;
      }

      // Let it write for a random while, then kill it mid-stride.
      await run.waitFor((l) => l.event === 'grant', 10_000);
      await sleep(30 + Math.floor(Math.random() * 400));
      await kill9(run);

      const grants = run.lines.filter((l) => l.event === 'grant');
      expect(grants.length).toBeGreaterThan(0);
      grantsTotal += grants.length;
      let prev = maxAcked;
      for (const g of grants) {
        const t = BigInt(g.token ?? '0');
        expect(t, `token ${t} minted again or lower after a crash (previous ${prev})`).toBeGreaterThan(prev);
        prev = t;
      }
      maxAcked = prev;
      for (const l of run.lines) if (l.event === 'admitted') maxAdmitted = BigInt(l.token ?? '0');
      lastGrant = grants[grants.length - 1] ?? null;
      const tail = run.lines.slice(run.lines.indexOf(lastGrant as Line));
      lastReleased = tail.some((l) => l.event === 'released');
    }
    expect(grantsTotal).toBeGreaterThan(ROUNDS);
  }, 180_000);
});
