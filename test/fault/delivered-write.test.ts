/**
 * A write already delivered when its gateway stops is applied before the next owner's
 * (docs/adr/0018-lock-delay.md, docs/safety.md). Owner A (a short lease) writes through
 * gateway 1; the upstream takes 3 s to apply it (the route's bound, `timeoutMs`, is 4 s);
 * 300 ms after the request reached the upstream, gateway 1 stops:
 *
 * - all of it (SIGSTOP: a VM pause);
 * - one data worker of `serve --workers 2` (SIGSTOP of the worker that sent A's write;
 *   its primary runs on);
 * - its event loop blocked for 9 s by a synchronous task (through the inspector, from
 *   outside: lib/processes.ts).
 *
 * A's lease lapses; B acquires and writes through gateway 2, retrying on 503. Gateway 2
 * ends gateway 1's silent session after its TTL (1.5 s), but A's entry was delivering:
 * it counts for its lock-delay (4 s + 25 %) after that, so B reaches the upstream only
 * once A's write was applied. Before the lock-delay, B went as soon as the session
 * lapsed, ~1 s before A's write was applied: the checker's stale-owner. A control where
 * gateway 1 stays healthy shows no lock-delay wait (B waits only until A is answered).
 * Every run ends with the history checker, on Redis, Postgres and the embedded store.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatViolation } from '../checker/index.js';
import { freePort, startFencegate, type FencegateProcess } from '../helpers/procs.js';
import {
  checkRun,
  HistoryRecorder,
  opId,
  openFaultStore,
  startGatedUpstream,
  writePolicy,
  type FaultStore,
  type GatedUpstream,
  type StoreKind,
  type WriteResult,
} from './harness/index.js';
import { stopOutsideWriteLock } from './lib/embedded-pause.js';
import { blockEventLoop, childPids, ownerOfPort } from './lib/processes.js';
import { sleep, until } from './lib/workload.js';

const SESSION_TTL = ['--session-ttl-ms', '1500'];
/** The route's upstream bound (its timeoutMs), and how long the upstream takes to apply A. */
const BOUND_MS = 4000;
const APPLY_MS = 3000;

interface Run {
  history: HistoryRecorder;
  lock: string;
  id: string;
  tag: string;
}

function newRun(): Run {
  const tag = randomBytes(3).toString('hex');
  return { history: new HistoryRecorder(), lock: `doc:${tag}`, id: tag, tag };
}

/** fencegate_lock_delay_waits_total{route="docs"} on a gateway's control listener. */
async function lockDelayWaits(control: string): Promise<number> {
  const text = await (await fetch(`${control}/metrics`, { signal: AbortSignal.timeout(20_000) })).text();
  const m = /^fencegate_lock_delay_waits_total\{route="docs"\}\s+(\S+)/m.exec(text);
  return Number(m?.[1] ?? NaN);
}

/** B's owner: retries its write (a new request id each time) on 503 until it is forwarded. */
async function writeUntilForwarded(
  run: Run,
  data: string,
  token: string,
  writer: string,
): Promise<{ result: WriteResult; requestId: string }> {
  const end = Date.now() + 60_000;
  for (;;) {
    const requestId = opId(writer);
    const path = `/docs/orders/${run.id}`;
    const result = await run.history.write({ data, path, lock: run.lock, token, writer, requestId });
    if (result.status !== 503 || Date.now() > end) return { result, requestId };
    await sleep(200);
  }
}

type Stop = 'gateway' | 'worker' | 'event loop' | 'nothing (control)';

describe.each(['redis', 'postgres', 'embedded'] as StoreKind[])(
  'a delivered write is applied before the next owner’s when its gateway stops (%s)',
  (kind) => {
    let store: FaultStore | null = null;
    let upstream: GatedUpstream | null = null;
    let gw2: FencegateProcess | null = null;
    let policy = { dir: '', file: '' };

    beforeAll(async () => {
      upstream = await startGatedUpstream();
      store = await openFaultStore(kind);
      policy = await writePolicy(
        { app: { url: upstream.url, timeoutMs: BOUND_MS, breaker: { volumeThreshold: 10_000 } } },
        [{ name: 'docs', path: '/docs/orders/:id', upstream: 'app', lock: 'doc:{id}', drainTimeoutMs: 1500 }],
      );
      gw2 = await startFencegate([...store.args, '--policies', policy.file, ...SESSION_TTL]);
    }, 120_000);

    afterAll(async () => {
      await gw2?.kill();
      await upstream?.close();
      await store?.cleanup();
      if (policy.dir) await rm(policy.dir, { recursive: true, force: true });
    }, 60_000);

    it.each<Stop>(['gateway', 'worker', 'event loop', 'nothing (control)'])(
      'gateway 1 stops (%s) 300 ms after delivering A’s write',
      async (stop) => {
        const [g2, up, st] = [gw2 as FencegateProcess, upstream as GatedUpstream, store as FaultStore];
        const inspectPort = await freePort();
        const g1 = await startFencegate(
          [
            ...st.args,
            '--policies',
            policy.file,
            ...SESSION_TTL,
            ...(stop === 'worker' ? ['--workers', '2'] : []),
          ],
          stop === 'event loop' ? { NODE_OPTIONS: `--inspect-port=127.0.0.1:${inspectPort}` } : {},
        );
        const pid = g1.proc.pid as number;
        const stopped: number[] = [];
        const resume = () => {
          for (const p of stopped.splice(0)) {
            try {
              process.kill(p, 'SIGCONT');
            } catch {
              /* gone */
            }
          }
        };
        try {
          const run = newRun();
          const waitsBefore = await lockDelayWaits(g2.control);
          const la = await run.history.acquire(g1.control, run.lock, `a-${run.tag}`, { ttlMs: 1000 });
          expect(la).not.toBeNull();
          const reqA = opId(`a-${run.tag}`);
          const tA = run.history.write({
            data: g1.data,
            path: `/docs/orders/${run.id}?delayMs=${APPLY_MS}`,
            lock: run.lock,
            token: la?.fencingToken as string,
            writer: `a-${run.tag}`,
            requestId: reqA,
            timeoutMs: 60_000,
          });
          await until('A at the upstream', async () => up.indexOf('received', reqA) >= 0);
          await sleep(300);
          let unblocked: Promise<void> = Promise.resolve();
          if (stop === 'gateway' || stop === 'worker') {
            let pids = [pid];
            if (stop === 'worker') {
              const event = up.events[up.indexOf('received', reqA)];
              const port = event?.type === 'received' ? event.port : null;
              const worker = port === null ? null : ownerOfPort(childPids(pid), port);
              expect(worker, 'the worker that sent A').not.toBeNull();
              pids = [worker as number];
            }
            stopped.push(...pids);
            // On the embedded store, not while a stopped process holds the directory's write
            // lock: that would stop gateway 2's writes too (docs/stores-embedded.md).
            if (st.dir === null) for (const p of pids) process.kill(p, 'SIGSTOP');
            else await stopOutsideWriteLock(st.dir, pids);
          } else if (stop === 'event loop') {
            unblocked = (await blockEventLoop(pid, inspectPort, 9000)).done;
          }
          const lb = await run.history.acquire(g2.control, run.lock, `b-${run.tag}`, {
            ttlMs: 60_000,
            waitMs: 10_000,
          });
          expect(lb).not.toBeNull();
          const b = await writeUntilForwarded(run, g2.data, lb?.fencingToken as string, `b-${run.tag}`);
          expect(b.result.status).toBe(200);
          // The order at the resource: A's write applied before B's arrived.
          expect(up.indexOf('applied', reqA)).toBeGreaterThanOrEqual(0);
          expect(up.indexOf('applied', reqA)).toBeLessThan(up.indexOf('received', b.requestId));
          const waits = (await lockDelayWaits(g2.control)) - waitsBefore;
          if (stop === 'nothing (control)')
            expect(waits).toBe(0); // a healthy gateway: no lock-delay
          else expect(waits).toBeGreaterThan(0); // B waited out A's lock-delay, and it shows
          resume();
          await unblocked;
          await tA;
          const { result } = await checkRun(up.url, run.history, { only: (w) => w.lock === run.lock });
          expect(result.ok, formatViolation(result)).toBe(true);
          if (stop !== 'nothing (control)') {
            const events = (await (await fetch(`${g2.control}/v1/events?type=lock-delay`)).json()) as {
              events: { lock: string; type: string; reason: string }[];
            };
            expect(events.events.some((e) => e.lock === run.lock && e.reason === 'delivered-write')).toBe(
              true,
            );
          }
        } finally {
          resume();
          await g1.kill();
        }
      },
      120_000,
    );
  },
);
