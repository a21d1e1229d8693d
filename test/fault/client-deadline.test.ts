/**
 * The client's deadline holds through stalls, late answers and replays, with real
 * fencegate processes on every store.
 *
 * - Event-loop stall: an owner (its own process, SDK with auto-renewal, TTL 1 s) busy-waits
 *   2.5 s; meanwhile another owner takes the lock and writes. Right after the stall the
 *   stalled owner's SDK says lost, throwIfLost throws, and lock.fetch sends nothing: the
 *   upstream never sees that write. The run ends with the history checker.
 * - Late acquire answer: a TCP proxy in front of the control listener delays every answer
 *   by 1.5 s; an acquire with TTL 1 s through it never returns a live Lock.
 * - Replay of a dead lease: the same requestId after its lease expired, after another
 *   owner's grant and after release is refused `replay-ended`, and the SDK throws
 *   LeaseLostError instead of returning a Lock.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FencegateClient, LeaseLostError } from '../../src/client/index.js';
import { formatViolation, type ClientOperation, type GrantRecord } from '../checker/index.js';
import { startFencegate, type FencegateProcess } from '../helpers/procs.js';
import {
  checkRun,
  HistoryRecorder,
  opId,
  openFaultStore,
  startChildClient,
  startGatedUpstream,
  writePolicy,
  type ChildClient,
  type FaultStore,
  type GatedUpstream,
  type StoreKind,
} from './harness/index.js';
import { sleep } from '../helpers/wait.js';

const KINDS: StoreKind[] = ['redis', 'postgres', 'embedded'];

/** A TCP proxy that forwards requests at once and every byte of the answers `delayMs` late. */
async function delayingProxy(
  target: string,
  delayMs: number,
): Promise<{ url: string; close(): Promise<void> }> {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const up = connect(Number(port), hostname);
    sockets.add(client).add(up);
    client.pipe(up);
    up.on('data', (d: Buffer) => setTimeout(() => client.write(d), delayMs));
    up.on('end', () => setTimeout(() => client.end(), delayMs));
    const drop = () => {
      client.destroy();
      up.destroy();
    };
    client.on('error', drop);
    up.on('error', drop);
    client.on('close', () => setTimeout(() => up.destroy(), delayMs));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port: p } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${p}`,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

async function post(base: string, lock: string, body: unknown) {
  const res = await fetch(`${base}/v1/locks/${encodeURIComponent(lock)}/acquire`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

describe.each(KINDS)('client deadline (%s store)', (kind) => {
  let store: FaultStore | null = null;
  let upstream: GatedUpstream | null = null;
  let gateway: FencegateProcess | null = null;
  let child: ChildClient | null = null;
  let policyDir = '';

  beforeAll(async () => {
    upstream = await startGatedUpstream();
    store = await openFaultStore(kind);
    const policy = await writePolicy({ orders: { url: upstream.url, timeoutMs: 5000 } }, [
      { name: 'order-writes', path: '/orders/:orderId', upstream: 'orders', lock: 'order:{orderId}' },
    ]);
    policyDir = policy.dir;
    gateway = await startFencegate([...store.args, '--policies', policy.file]);
  }, 120_000);

  afterEach(async () => {
    await child?.kill();
    child = null;
  });

  afterAll(async () => {
    await gateway?.kill();
    await upstream?.close();
    await store?.cleanup();
    if (policyDir) await rm(policyDir, { recursive: true, force: true });
  }, 60_000);

  it('after an event-loop stall past the lease, the SDK reports the loss and sends nothing', async () => {
    const gw = gateway as FencegateProcess;
    const up = upstream as GatedUpstream;
    const history = new HistoryRecorder();
    const tag = randomBytes(3).toString('hex');
    const orderId = `stall-${tag}`;
    const lock = `order:${orderId}`;
    const ownerA = `stalled-${tag}`;
    const ownerB = `next-${tag}`;
    child = startChildClient('stall-owner.mjs', {
      control: gw.control,
      data: gw.data,
      path: `/orders/${orderId}`,
      lock,
      owner: ownerA,
      ttlMs: 1000,
      stallMs: 2500,
      runId: `stall-${tag}`,
    });
    const grantA = (await child.next('grant')).grant as GrantRecord;
    expect(((await child.next('op')).op as ClientOperation).acknowledged).toBe(true);
    await child.next('ready');
    child.sendLine('stall');

    // B queues and is granted when A's lease runs out (A cannot renew while stalled).
    const lockB = await history.acquire(gw.control, lock, ownerB, { ttlMs: 10_000, waitMs: 20_000 });
    expect(lockB).not.toBeNull();
    expect(BigInt(lockB?.fencingToken as string)).toBeGreaterThan(BigInt(grantA.token));
    const writeB = await history.write({
      data: gw.data,
      path: `/orders/${orderId}`,
      lock,
      token: lockB?.fencingToken as string,
      writer: ownerB,
      requestId: opId(ownerB),
    });
    expect(writeB.status).toBe(200);

    const done = await child.next('done');
    expect(done.lost).toBe(true);
    expect(done.thrown).toBe('LeaseLostError');
    expect(done.remainingMs).toBe(0);
    const after = child.events.find((e) => e.event === 'op' && e.label === 'after-stall');
    const staleOp = after?.op as ClientOperation;
    expect(staleOp.status, JSON.stringify(after)).toBe('error');
    expect(up.indexOf('received', staleOp.requestId), 'the stalled owner’s write reached the upstream').toBe(
      -1,
    );
    expect(await child.exited()).toBe(0);

    history.merge({
      grants: child.events.filter((e) => e.event === 'grant').map((e) => e.grant as GrantRecord),
      operations: child.events.filter((e) => e.event === 'op').map((e) => e.op as ClientOperation),
    });
    await lockB?.release();
    const { result, writes } = await checkRun(up.url, history, { only: (w) => w.lock === lock });
    expect(result.ok, formatViolation(result)).toBe(true);
    expect(writes.filter((w) => w.id === orderId).map((w) => w.writer)).toEqual([ownerA, ownerB]);
  }, 120_000);

  it('an acquire answered after its TTL never hands back a live Lock', async () => {
    const gw = gateway as FencegateProcess;
    const proxy = await delayingProxy(gw.control, 1500);
    try {
      const lock = `late:${randomBytes(3).toString('hex')}`;
      const late = new FencegateClient({ url: proxy.url, requestTimeoutMs: 10_000 });
      const err = await late.acquire(lock, { owner: 'late', ttlMs: 1000, autoRenew: false }).then(
        (l) => l,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(LeaseLostError);
      // The lease it was granted is gone (released or expired): the next owner gets token+1.
      const direct = new FencegateClient({ url: gw.control });
      const status = await direct.inspect(lock);
      const next = await direct.acquire(lock, { owner: 'next', ttlMs: 5000, waitMs: 5000, autoRenew: false });
      expect(next.token).toBe(BigInt(status?.token as string) + 1n);
      await next.release();
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it('refuses the replay of a lease that expired, was taken over, or was released', async () => {
    const gw = gateway as FencegateProcess;
    const lock = `replay:${randomBytes(3).toString('hex')}`;
    const sdk = new FencegateClient({ url: gw.control });
    const requestId = randomUUID();
    const first = await post(gw.control, lock, { owner: 'alice', ttlMs: 300, requestId });
    expect(first.status).toBe(200);
    // While it is live, a replay is the same lease.
    const live = await post(gw.control, lock, { owner: 'alice', ttlMs: 300, requestId });
    expect(live.json).toMatchObject({ leaseId: first.json.leaseId, replayed: true });

    await sleep(500);
    const ended = {
      type: 'urn:fencegate:replay-ended',
      leaseId: first.json.leaseId,
      token: first.json.token,
    };
    const expired = await post(gw.control, lock, { owner: 'alice', ttlMs: 300, requestId });
    expect(expired.status).toBe(409);
    expect(expired.json).toMatchObject(ended);
    await expect(sdk.acquire(lock, { owner: 'alice', ttlMs: 300, requestId })).rejects.toBeInstanceOf(
      LeaseLostError,
    );

    const bob = await sdk.acquire(lock, { owner: 'bob', ttlMs: 60_000, autoRenew: false });
    expect(bob.token).toBe(BigInt(first.json.token as string) + 1n);
    const takenOver = await post(gw.control, lock, { owner: 'alice', ttlMs: 60_000, requestId });
    expect(takenOver.status).toBe(409);
    expect(takenOver.json).toMatchObject(ended);
    await expect(sdk.acquire(lock, { owner: 'alice', ttlMs: 60_000, requestId })).rejects.toBeInstanceOf(
      LeaseLostError,
    );

    // Released: bob's own replay is refused too, never a fresh expiresAt.
    const bobId = randomUUID();
    await bob.release();
    const carol = await post(gw.control, lock, { owner: 'carol', ttlMs: 60_000, requestId: bobId });
    expect(carol.status).toBe(200);
    const carolRel = await fetch(`${gw.control}/v1/locks/${encodeURIComponent(lock)}/release`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ leaseId: carol.json.leaseId }),
    });
    expect(carolRel.status).toBe(200);
    const afterRelease = await post(gw.control, lock, { owner: 'carol', ttlMs: 60_000, requestId: bobId });
    expect(afterRelease.status).toBe(409);
    expect(afterRelease.json).toMatchObject({
      type: 'urn:fencegate:replay-ended',
      leaseId: carol.json.leaseId,
    });
  }, 60_000);
});
