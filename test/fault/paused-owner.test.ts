/**
 * The classic fencing failure, with a real pause: a lock owner in its own process
 * (test/fault/clients/paused-owner.mjs, on the built client SDK with auto-renew, so its
 * renewals stop with it) acquires with a short TTL and writes once; the test SIGSTOPs it
 * past its lease; another owner acquires (a higher token) and writes; SIGCONT; the old
 * owner's next write, sent right after waking with its old token, is refused 409
 * stale-token and never reaches the upstream. Meanwhile a small background workload
 * (with in-process simulated pauses) runs on other locks, and the whole run goes through
 * the history checker.
 *
 * A second case uses a `check: lease` route: the owner wakes after its lease expired but
 * before anyone else took the lock; its write is refused 409 lease-expired all the same
 * (docs/policy.md, a Chubby-style sequencer check).
 *
 * A third case uses a `check: sequencer` route: the woken owner's signed sequencer has
 * expired (403), and the live token it can learn (from the issuer's API) gets it nothing
 * either, alone or with its own sequencer. On Redis, Postgres and the embedded store.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FencegateClient } from '../../src/client/index.js';
import { formatViolation, type ClientOperation, type GrantRecord } from '../checker/index.js';
import { tempDir, type FencegateProcess } from '../helpers/procs.js';
import { initKeyFile, writeKeyFile } from '../../src/sequencer/index.js';
import { join } from 'node:path';
import {
  checkRun,
  HistoryRecorder,
  opId,
  runWorkload,
  startChildClient,
  useFaultSite,
  type ChildClient,
  type GatedUpstream,
  type StoreKind,
} from './harness/index.js';
import { sleep } from '../helpers/wait.js';

const KINDS: StoreKind[] = ['redis', 'postgres', 'embedded'];
/** The child's grants and write attempts, for the run's history. */
function childRecords(child: ChildClient) {
  return {
    grants: child.events.filter((e) => e.event === 'grant').map((e) => e.grant as GrantRecord),
    operations: child.events.filter((e) => e.event === 'op').map((e) => e.op as ClientOperation),
  };
}

describe.each(KINDS)('paused owner (%s store)', (kind) => {
  const site = useFaultSite();
  let upstream: GatedUpstream | null = null;
  let gateway: FencegateProcess | null = null;
  let child: ChildClient | null = null;

  beforeAll(async () => {
    upstream = await site.startUpstream();
    await site.openStore(kind);
    await site.writePolicy({ orders: { url: upstream.url, timeoutMs: 5000 } }, [
      { name: 'order-writes', path: '/orders/:orderId', upstream: 'orders', lock: 'order:{orderId}' },
      {
        name: 'leased-writes',
        path: '/leased/orders/:orderId',
        upstream: 'orders',
        lock: 'leased:{orderId}',
        check: 'lease',
      },
      {
        name: 'sequenced-writes',
        path: '/sequenced/orders/:orderId',
        upstream: 'orders',
        lock: 'sequenced:{orderId}',
        check: 'sequencer',
      },
    ]);
    const keysDir = await tempDir('fg-fault-keys-');
    site.defer(() => rm(keysDir, { recursive: true, force: true }));
    const keys = join(keysDir, 'sequencer-keys.json');
    await writeKeyFile(keys, initKeyFile(), { exclusive: true });
    gateway = await site.serve(['--sequencer-keys', keys]);
  }, 60_000);

  afterEach(async () => {
    await child?.kill();
    child = null;
  });

  it('refuses the woken owner’s write with its old token; it is never applied', async () => {
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const history = new HistoryRecorder();
    const tag = randomBytes(3).toString('hex');
    const orderId = `paused-${tag}`;
    const lock = `order:${orderId}`;

    let scenarioOver = false;
    const background = runWorkload(history, {
      workers: 2,
      orderIds: [`bg1-${tag}`, `bg2-${tag}`],
      ttlMs: 400,
      maxOps: 40,
      maxDurationMs: 30_000,
      pauseChance: 0.25,
      writerPrefix: `bg-${tag}-`,
      endpoint: () => ({ control: gw.control, data: gw.data }),
      stop: () => scenarioOver,
    });

    const ownerA = `owner-a-${tag}`;
    const ownerB = `owner-b-${tag}`;
    child = startChildClient('paused-owner.mjs', {
      control: gw.control,
      data: gw.data,
      path: `/orders/${orderId}`,
      lock,
      owner: ownerA,
      // Long enough for the grant to arrive in time on a loaded machine (the embedded store
      // answered an acquire later than 600 ms minus the client's margin once in CI).
      ttlMs: 2000,
      autoRenew: true,
      runId: `paused-${tag}`,
    });
    const grantA = (await child.next('grant')).grant as GrantRecord;
    const first = await child.next('op');
    expect((first.op as ClientOperation).acknowledged, JSON.stringify(first)).toBe(true);
    await child.next('ready');

    child.signal('SIGSTOP'); // renewals stop with it: the lease runs out

    // B queues for the lock and gets it when A's lease expires.
    const lockB = await history.acquire(gw.control, lock, ownerB, { ttlMs: 10_000, waitMs: 20_000 });
    expect(lockB, 'owner B got the lock after A’s lease expired').not.toBeNull();
    const tokenB = lockB?.fencingToken as string;
    expect(BigInt(tokenB)).toBeGreaterThan(BigInt(grantA.token));
    const writeB = await history.write({
      data: gw.data,
      path: `/orders/${orderId}`,
      lock,
      token: tokenB,
      writer: ownerB,
      requestId: opId(ownerB),
    });
    expect(writeB.status).toBe(200);

    child.sendLine('wake'); // waiting in the pipe: read the moment the process runs again
    child.signal('SIGCONT');
    const done = await child.next('done');
    // The SDK's own fail-closed deadline fired too once the process ran again (Lock.signal):
    // a client using lock.fetch would not have sent this write at all. The gateway must not
    // rely on that, which is why the child sends it with plain fetch.
    expect(done.leaseLostLocally).toBe(true);
    const afterPause = child.events.find((e) => e.event === 'op' && e.label === 'after-pause');
    expect(afterPause, JSON.stringify(child.events)).toBeDefined();
    const staleOp = afterPause?.op as ClientOperation;
    const body = afterPause?.body as Record<string, unknown>;
    expect(staleOp.token).toBe(grantA.token);
    expect(staleOp.status, JSON.stringify(body)).toBe(409);
    expect(body.type).toBe('urn:fencegate:stale-token');
    expect(body.token).toBe(grantA.token);
    expect(body.highest).toBe(tokenB);
    expect(await child.exited()).toBe(0);
    expect(up.indexOf('received', staleOp.requestId), 'the stale write reached the upstream').toBe(-1);

    history.merge(childRecords(child));
    await lockB?.release();
    scenarioOver = true;
    const bg = await background;

    const { result, writes } = await checkRun(up.url, history);
    expect(result.ok, formatViolation(result)).toBe(true);
    expect(writes.filter((w) => w.id === orderId).map((w) => w.writer)).toEqual([ownerA, ownerB]);
    expect(bg.grants).toBeGreaterThan(0);
    if (result.ok) expect(result.stats.acknowledged).toBeGreaterThanOrEqual(2);
  }, 120_000);

  it('check: lease refuses the woken owner even when nobody took the lock over', async () => {
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const history = new HistoryRecorder();
    const tag = randomBytes(3).toString('hex');
    const orderId = `lapsed-${tag}`;
    const lock = `leased:${orderId}`;
    child = startChildClient('paused-owner.mjs', {
      control: gw.control,
      data: gw.data,
      path: `/leased/orders/${orderId}`,
      lock,
      owner: `owner-${tag}`,
      ttlMs: 2000, // as above: the grant must arrive within it on a loaded machine
      autoRenew: true,
      runId: `lapsed-${tag}`,
    });
    const grant = (await child.next('grant')).grant as GrantRecord;
    expect(((await child.next('op')).op as ClientOperation).status).toBe(201);
    await child.next('ready');
    child.signal('SIGSTOP');

    // Wait (bounded) until the issuer itself says the lease is gone; nobody acquires.
    const inspector = new FencegateClient({ url: gw.control, requestTimeoutMs: 10_000 });
    let held = true;
    for (let i = 0; i < 200 && held; i++) {
      await sleep(50);
      held = (await inspector.inspect(lock))?.held ?? false;
    }
    expect(held, 'the lease expired while the owner was stopped').toBe(false);

    child.sendLine('wake');
    child.signal('SIGCONT');
    await child.next('done');
    const afterPause = child.events.find((e) => e.event === 'op' && e.label === 'after-pause');
    const op = afterPause?.op as ClientOperation;
    const body = afterPause?.body as Record<string, unknown>;
    expect(op.token).toBe(grant.token);
    expect(op.status, JSON.stringify(body)).toBe(409);
    expect(body.type).toBe('urn:fencegate:lease-expired');
    expect(up.indexOf('received', op.requestId)).toBe(-1);
    expect(await child.exited()).toBe(0);

    history.merge(childRecords(child));
    const { result } = await checkRun(up.url, history, { only: (w) => w.lock === lock });
    expect(result.ok, formatViolation(result)).toBe(true);
  }, 120_000);
  it('check: sequencer refuses the woken owner, and the live token it learned gets it nothing', async () => {
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const history = new HistoryRecorder();
    const tag = randomBytes(3).toString('hex');
    const orderId = `sequenced-${tag}`;
    const lock = `sequenced:${orderId}`;
    const path = `/sequenced/orders/${orderId}`;
    const ownerA = `owner-a-${tag}`;
    const ownerB = `owner-b-${tag}`;
    child = startChildClient('paused-owner.mjs', {
      control: gw.control,
      data: gw.data,
      path,
      lock,
      owner: ownerA,
      // Long enough for the grant to arrive in time on a loaded machine (the embedded store
      // answered an acquire later than 600 ms minus the client's margin once in CI).
      ttlMs: 2000,
      autoRenew: true,
      runId: `sequenced-${tag}`,
      sequencer: true,
    });
    const granted = await child.next('grant');
    const grantA = granted.grant as GrantRecord;
    const sequencerA = granted.sequencer as string;
    expect(sequencerA).toMatch(/\./);
    expect(((await child.next('op')).op as ClientOperation).acknowledged).toBe(true);
    await child.next('ready');
    child.signal('SIGSTOP');

    const lockB = await history.acquire(gw.control, lock, ownerB, { ttlMs: 10_000, waitMs: 20_000 });
    expect(lockB, 'owner B got the lock after A’s lease expired').not.toBeNull();
    const tokenB = lockB?.fencingToken as string;
    expect(BigInt(tokenB)).toBe(BigInt(grantA.token) + 1n);
    const writeB = await history.write({
      data: gw.data,
      path,
      lock,
      token: tokenB,
      sequencer: lockB?.sequencer ?? '',
      writer: ownerB,
      requestId: opId(ownerB),
    });
    expect(writeB.status).toBe(200);

    child.sendLine('wake');
    child.signal('SIGCONT');
    await child.next('done');
    const afterPause = child.events.find((e) => e.event === 'op' && e.label === 'after-pause');
    const staleOp = afterPause?.op as ClientOperation;
    const body = afterPause?.body as Record<string, unknown>;
    expect(staleOp.token).toBe(grantA.token);
    expect(staleOp.status, JSON.stringify(body)).toBe(403);
    expect(body.type).toBe('urn:fencegate:token-invalid');
    expect(String(body.detail)).toMatch(/expired/);
    expect(await child.exited()).toBe(0);

    // A learns the live token (here from the issuer's API; tA+1 or a 409 would tell it too).
    const live = await new FencegateClient({ url: gw.control }).inspect(lock);
    expect(live?.token).toBe(tokenB);
    const alone = await history.write({
      data: gw.data,
      path,
      lock,
      token: tokenB,
      writer: ownerA,
      requestId: opId(ownerA),
    });
    expect(alone.problem).toBe('urn:fencegate:sequencer-required');
    const withOwn = await history.write({
      data: gw.data,
      path,
      lock,
      token: tokenB,
      sequencer: sequencerA,
      writer: ownerA,
      requestId: opId(ownerA),
    });
    expect(withOwn.problem).toBe('urn:fencegate:token-invalid');
    for (const op of [staleOp, ...history.operations.filter((o) => o.writer === ownerA)]) {
      expect(up.indexOf('received', op.requestId), `${op.requestId} reached the upstream`).toBe(-1);
    }

    history.merge(childRecords(child));
    await lockB?.release();
    const { result, writes } = await checkRun(up.url, history, { only: (w) => w.lock === lock });
    expect(result.ok, formatViolation(result)).toBe(true);
    expect(writes.filter((w) => w.id === orderId).map((w) => w.writer)).toEqual([ownerA, ownerB]);
  }, 120_000);
});
