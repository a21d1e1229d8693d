/**
 * An admission whose answer the gateway never got, but which the store applied later.
 *
 * The store is paused (SIGSTOP) while a fenced write's admission is on its way: the
 * gateway gives up on it (503, not forwarded) and its own command timeout passes too,
 * then the store wakes up and applies it, leaving an in-flight entry behind for a
 * request that is over. A network cut that holds the command in the kernel's send queue
 * until the link is back does the same (test/fault/netcut.test.ts found it: the workload
 * never wrote again, every write 503 at the drain barrier).
 *
 * The entry belongs to this gateway's own session, which stays alive, so no observer may
 * drop it: the gateway must finish it itself. The next owner's higher token then gets
 * through, and the run passes the history checker.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startFencegate, startRedis, type FencegateProcess, type RedisProcess } from '../helpers/procs.js';
import {
  acquireEventually,
  applied,
  checkRun,
  formatViolation,
  readyz,
  Recorder,
  release,
  sleep,
  startSite,
  until,
  write,
  type Lease,
  type Site,
} from './lib/workload.js';

let server: FencegateProcess | null = null;
let site: Site | null = null;
let redis: RedisProcess | null = null;
afterEach(async () => {
  redis?.resume();
  await server?.kill();
  await redis?.stop();
  await site?.close();
  server = site = redis = null;
});

/** The highest token the store has admitted for `key` (GET /v1/locks/{key}). */
async function highest(control: string, key: string): Promise<string | null> {
  const r = await request(`${control}/v1/locks/${encodeURIComponent(key)}`);
  const body = (await r.body.json()) as { highest?: string | null };
  return body.highest ?? null;
}

describe('an admission the store applied after the gateway gave up on it (Redis paused)', () => {
  it('is finished by the gateway: the next owner writes, the history holds', async () => {
    redis = await startRedis({ durable: true });
    site = await startSite();
    server = await startFencegate(['--store', redis.url, '--policies', site.policy]);
    const gw = server;
    const r = redis;
    const rec = new Recorder();

    // One admission first: the gateway's fence batches then carry the epoch floor they
    // know instead of reading it before sending, so the paused store gets the admission.
    const primer = await acquireEventually(gw.control, 'order:primer', 'primer', rec);
    expect((await write(gw.data, 'primer', primer.token, 'primer', rec)).status).toBe(201);
    await release(gw.control, primer);

    // Each round gives a new owner's first write to a paused store; until the store has
    // applied one (its token became the highest admitted), the scenario has not happened.
    let lost: Lease | null = null;
    for (let round = 0; round < 5 && lost === null; round++) {
      const owner = await acquireEventually(gw.control, 'order:lost', `owner${round}`, rec, {
        ttlMs: 600_000,
      });
      r.pause();
      const w = await write(gw.data, 'lost', owner.token, owner.owner, rec);
      expect(w.status).toBe(503);
      await sleep(500); // past the gateway's own command timeout too: the answer is lost for good
      r.resume();
      await until('readyz reports the store up', async () => (await readyz(gw.control)) === 200, 200);
      expect(applied(site.upstream, w.requestId)).toBe(false);
      if ((await highest(gw.control, 'order:lost')) === owner.token) lost = owner;
      expect(await release(gw.control, owner)).toBe(200);
    }
    expect(lost, 'the paused store never applied the abandoned admission').not.toBeNull();

    const next = await acquireEventually(gw.control, 'order:lost', 'next', rec);
    const statuses: (number | string)[] = [];
    await until(
      'the next owner writes',
      async () => {
        statuses.push((await write(gw.data, 'lost', next.token, 'next', rec)).status);
        return statuses.at(-1) === 201 || statuses.at(-1) === 200;
      },
      8,
      250,
    ).catch((err: unknown) => {
      throw new Error(`${String(err)}; answers: ${statuses.join(', ')}`);
    });
    await release(gw.control, next);

    const result = checkRun(site.upstream, rec);
    expect(result.ok, result.ok ? '' : formatViolation(result)).toBe(true);
  }, 90_000);
});
