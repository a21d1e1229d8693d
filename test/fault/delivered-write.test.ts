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
import { beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/procs.js';
import { sleep } from '../helpers/wait.js';
import {
  expectRunClean,
  newRun,
  opId,
  SESSION_TTL,
  useFaultSite,
  writeUntilForwarded,
  type FaultSite,
  type GatedUpstream,
  type SiteGateway,
  type StoreKind,
} from './harness/index.js';
import { blockEventLoop, childPids, ownerOfPort } from './lib/processes.js';
import { until } from './lib/workload.js';

/** The route's upstream bound (its timeoutMs), and how long the upstream takes to apply A. */
const BOUND_MS = 4000;
const APPLY_MS = 3000;
/** How long B's owner retries on 503 before it gives up. */
const B_RETRY_MS = 60_000;

/** fencegate_lock_delay_waits_total{route="docs"} on a gateway's control listener. */
async function lockDelayWaits(control: string): Promise<number> {
  const text = await (await fetch(`${control}/metrics`, { signal: AbortSignal.timeout(20_000) })).text();
  const m = /^fencegate_lock_delay_waits_total\{route="docs"\}\s+(\S+)/m.exec(text);
  return Number(m?.[1] ?? NaN);
}

type Stop = 'gateway' | 'worker' | 'event loop' | 'nothing (control)';

describe.each(['redis', 'postgres', 'embedded'] as StoreKind[])(
  'a delivered write is applied before the next owner’s when its gateway stops (%s)',
  (kind) => {
    const site: FaultSite = useFaultSite({ serveArgs: SESSION_TTL });
    let gw2: SiteGateway | null = null;

    beforeAll(async () => {
      await site.startUpstream();
      await site.openStore(kind);
      await site.docsPolicy(BOUND_MS);
      gw2 = await site.serve();
    }, 120_000);

    it.each<Stop>(['gateway', 'worker', 'event loop', 'nothing (control)'])(
      'gateway 1 stops (%s) 300 ms after delivering A’s write',
      async (stop) => {
        const [g2, up] = [gw2 as SiteGateway, site.upstream as GatedUpstream];
        const inspectPort = await freePort();
        const g1 = await site.serve(
          stop === 'worker' ? ['--workers', '2'] : [],
          stop === 'event loop' ? { NODE_OPTIONS: `--inspect-port=127.0.0.1:${inspectPort}` } : {},
        );
        const pid = g1.pid;
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
            // On the embedded store, not while a stopped process holds the directory's write
            // lock: that would stop gateway 2's writes too (docs/stores-embedded.md).
            await site.pause(pids);
          } else if (stop === 'event loop') {
            unblocked = (await blockEventLoop(pid, inspectPort, 9000)).done;
          }
          const lb = await run.history.acquire(g2.control, run.lock, `b-${run.tag}`, {
            ttlMs: 60_000,
            waitMs: 10_000,
          });
          expect(lb).not.toBeNull();
          const b = await writeUntilForwarded(
            run,
            g2.data,
            lb?.fencingToken as string,
            `b-${run.tag}`,
            B_RETRY_MS,
          );
          expect(b.result.status).toBe(200);
          // The order at the resource: A's write applied before B's arrived.
          expect(up.indexOf('applied', reqA)).toBeGreaterThanOrEqual(0);
          expect(up.indexOf('applied', reqA)).toBeLessThan(up.indexOf('received', b.requestId));
          const waits = (await lockDelayWaits(g2.control)) - waitsBefore;
          if (stop === 'nothing (control)')
            expect(waits).toBe(0); // a healthy gateway: no lock-delay
          else expect(waits).toBeGreaterThan(0); // B waited out A's lock-delay, and it shows
          site.resume();
          await unblocked;
          await tA;
          await expectRunClean(up.url, run);
          if (stop !== 'nothing (control)') {
            const events = (await (await fetch(`${g2.control}/v1/events?type=lock-delay`)).json()) as {
              events: { lock: string; type: string; reason: string }[];
            };
            expect(events.events.some((e) => e.lock === run.lock && e.reason === 'delivered-write')).toBe(
              true,
            );
          }
        } finally {
          site.resume();
          await g1.kill();
        }
      },
      120_000,
    );
  },
);
