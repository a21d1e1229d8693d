/**
 * A small workload driver for the fault tests (test/fault/store-*, netcut, clock-skew):
 * the sample upstream in this process, a policy file pointing at it, clients that
 * acquire, write through the gateway with their token and release, and the three
 * records the history checker needs (grants, client operations, applied writes).
 *
 * Every request has a client-side timeout; every loop is bounded by a stop flag and
 * an iteration cap. Nothing here asserts on wall-clock durations.
 */
import { randomUUID } from 'node:crypto';
import { writeFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { expect } from 'vitest';
import { startSampleUpstream, type SampleUpstream } from '../../../src/sample/index.js';
import { appliedFromSample, checkHistory, formatViolation } from '../../checker/index.js';
import type { CheckResult, ClientOperation, GrantRecord } from '../../checker/index.js';
import { tempDir } from '../../helpers/procs.js';
import { sleep } from '../../helpers/wait.js';

export { sleep };

export interface Site {
  upstream: SampleUpstream;
  /** A policy file: PUT/POST/PATCH/DELETE /orders/:orderId fenced by order:{orderId}; GET /orders/* and /_writes plain. */
  policy: string;
  close(): Promise<void>;
}

/** The sample upstream on a free loopback port and a policy file for it. */
export async function startSite(options: { check?: 'token' | 'lease' } = {}): Promise<Site> {
  const upstream = await startSampleUpstream({ host: '127.0.0.1', port: 0 });
  const dir = await tempDir('fg-fault-policy-');
  const policy = join(dir, 'policy.yaml');
  await writeFile(
    policy,
    [
      'version: 1',
      'upstreams:',
      '  orders:',
      '    kind: http',
      `    url: ${upstream.url}`,
      '    timeoutMs: 10000',
      'routes:',
      '  - name: order-writes',
      '    methods: [POST, PUT, PATCH, DELETE]',
      '    path: /orders/:orderId',
      '    upstream: orders',
      "    lock: 'order:{orderId}'",
      '    fencing:',
      `      check: ${options.check ?? 'token'}`,
      '      drainTimeoutMs: 3000',
      '  - name: order-reads',
      '    methods: [GET, HEAD]',
      '    path: /orders/*',
      '    upstream: orders',
      '',
    ].join('\n'),
  );
  return {
    upstream,
    policy,
    async close() {
      await upstream.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface TimedGrant extends GrantRecord {
  /** performance.now() when the acquire was sent and when its answer arrived (real-time order of grants). */
  sentAt: number;
  receivedAt: number;
}

/** Everything the clients saw, in client order. */
export class Recorder {
  readonly grants: TimedGrant[] = [];
  readonly operations: ClientOperation[] = [];
  /** Statuses of acquire attempts (number, or 'error'/'timeout'). */
  readonly acquireStatuses: (number | string)[] = [];

  count(pred: (op: ClientOperation) => boolean): number {
    return this.operations.filter(pred).length;
  }
}

export interface Lease {
  key: string;
  owner: string;
  token: string;
  leaseId: string;
}

async function request(
  url: string,
  init: RequestInit,
  timeoutMs: number,
): Promise<{ status: number | 'error' | 'timeout'; body: unknown }> {
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: res.status, body };
  } catch (err) {
    const name = (err as { name?: string }).name;
    return { status: name === 'TimeoutError' || name === 'AbortError' ? 'timeout' : 'error', body: null };
  }
}

/** One acquire attempt (waitMs 0 unless given); records the grant. Null when not granted. */
export async function acquire(
  control: string,
  key: string,
  owner: string,
  rec: Recorder,
  options: { ttlMs?: number; waitMs?: number; timeoutMs?: number } = {},
): Promise<Lease | null> {
  const sentAt = performance.now();
  const r = await request(
    `${control}/v1/locks/${encodeURIComponent(key)}/acquire`,
    {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ owner, ttlMs: options.ttlMs ?? 2000, waitMs: options.waitMs ?? 0 }),
    },
    options.timeoutMs ?? 10_000,
  );
  rec.acquireStatuses.push(r.status);
  if (r.status !== 200) return null;
  const b = r.body as { token: string; leaseId: string };
  rec.grants.push({
    lock: key,
    token: b.token,
    owner,
    leaseId: b.leaseId,
    sentAt,
    receivedAt: performance.now(),
  });
  return { key, owner, token: b.token, leaseId: b.leaseId };
}

/** Acquire, retrying (store reconnecting, lock held) until granted or `deadlineMs` of tries passed. */
export async function acquireEventually(
  control: string,
  key: string,
  owner: string,
  rec: Recorder,
  options: { ttlMs?: number; attempts?: number } = {},
): Promise<Lease> {
  const attempts = options.attempts ?? 300;
  for (let i = 0; i < attempts; i++) {
    const l = await acquire(control, key, owner, rec, { ttlMs: options.ttlMs ?? 2000, waitMs: 500 });
    if (l) return l;
    await sleep(100);
  }
  throw new Error(`could not acquire ${key} for ${owner} in ${attempts} attempts`);
}

export async function release(control: string, lease: Lease): Promise<number | string> {
  const r = await request(
    `${control}/v1/locks/${encodeURIComponent(lease.key)}/release`,
    {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ leaseId: lease.leaseId }),
    },
    10_000,
  );
  return r.status;
}

/** A fenced write PUT /orders/<orderId> through the gateway, recorded as a client operation. */
export async function write(
  data: string,
  orderId: string,
  token: string | null,
  writer: string,
  rec: Recorder,
  options: { timeoutMs?: number } = {},
): Promise<{ status: number | 'error' | 'timeout'; requestId: string; body: unknown }> {
  const requestId = randomUUID();
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'x-request-id': requestId,
    'x-client-id': writer,
  };
  if (token !== null) headers['fencing-token'] = token;
  const r = await request(
    `${data}/orders/${encodeURIComponent(orderId)}`,
    { method: 'PUT', headers, body: JSON.stringify({ writer, token, requestId }) },
    options.timeoutMs ?? 15_000,
  );
  rec.operations.push({
    lock: `order:${orderId}`,
    token,
    writer,
    requestId,
    status: r.status,
    acknowledged: typeof r.status === 'number' && r.status >= 200 && r.status < 300,
  });
  return { ...r, requestId };
}

/** An unfenced read GET /orders/<orderId> through the gateway. */
export async function read(data: string, orderId: string): Promise<number | string> {
  return (await request(`${data}/orders/${encodeURIComponent(orderId)}`, { method: 'GET' }, 10_000)).status;
}

export async function readyz(control: string): Promise<number | string> {
  return (await request(`${control}/readyz`, { method: 'GET' }, 10_000)).status;
}

export interface Workload {
  stop(): Promise<void>;
  /** Writes answered 2xx so far. */
  readonly acknowledged: number;
}

/**
 * `workers` clients loop over `keys`: acquire (no wait), write twice with the token,
 * now and then write once more with an older token of theirs for that key (which the
 * fence must refuse if a later owner has written), release. Endpoints are read through
 * the getters each iteration, so a test may restart the gateway underneath.
 */
export function startWorkload(options: {
  control: () => string;
  data: () => string;
  rec: Recorder;
  keys: readonly string[];
  workers?: number;
  ttlMs?: number;
  maxIterations?: number;
  prefix?: string;
}): Workload {
  const { rec, keys } = options;
  let running = true;
  let acknowledged = 0;
  const oldTokens = new Map<string, string>();
  const worker = async (w: number) => {
    const owner = `${options.prefix ?? 'w'}${w}`;
    for (let i = 0; running && i < (options.maxIterations ?? 2000); i++) {
      const key = keys[(w + i) % keys.length] as string;
      const orderId = key.replace(/^order:/, '');
      const lease = await acquire(options.control(), key, owner, rec, { ttlMs: options.ttlMs ?? 2000 });
      if (!lease) {
        await sleep(30 + Math.random() * 50);
        continue;
      }
      for (let k = 0; k < 2 && running; k++) {
        const r = await write(options.data(), orderId, lease.token, owner, rec);
        if (typeof r.status === 'number' && r.status < 300) acknowledged++;
      }
      const old = oldTokens.get(`${owner}/${key}`);
      if (old !== undefined && i % 3 === 0) await write(options.data(), orderId, old, owner, rec);
      oldTokens.set(`${owner}/${key}`, lease.token);
      await release(options.control(), lease);
      await sleep(5 + Math.random() * 20);
    }
  };
  const all = Promise.all(Array.from({ length: options.workers ?? 3 }, (_, w) => worker(w)));
  return {
    async stop() {
      running = false;
      await all;
    },
    get acknowledged() {
      return acknowledged;
    },
  };
}

/** The history checker over the upstream's record and what the clients saw. */
/** The locks probeAndLoad's workload writes under. */
export const LOAD_KEYS = ['order:a', 'order:b', 'order:c'] as const;

/**
 * The opening of the store-fault scenarios against one gateway: a token the fence
 * refuses ("old" held `order:probe`, "new" took over with a long lease and wrote; old's
 * write got 409), then a workload of three clients on three locks that has written at
 * least 10 times.
 */
export async function probeAndLoad(
  gw: { control: string; data: string },
  rec: Recorder,
): Promise<{ oldLease: Lease; newLease: Lease; load: Workload }> {
  const oldLease = await acquireEventually(gw.control, 'order:probe', 'old', rec);
  await release(gw.control, oldLease);
  const newLease = await acquireEventually(gw.control, 'order:probe', 'new', rec, { ttlMs: 600_000 });
  expect((await write(gw.data, 'probe', newLease.token, 'new', rec)).status).toBe(201);
  expect((await write(gw.data, 'probe', oldLease.token, 'old', rec)).status).toBe(409);
  const load = startWorkload({
    control: () => gw.control,
    data: () => gw.data,
    rec,
    keys: LOAD_KEYS,
    workers: 3,
  });
  await until('the workload has written', async () => load.acknowledged >= 10);
  return { oldLease, newLease, load };
}

export function checkRun(upstream: SampleUpstream, rec: Recorder): CheckResult {
  return checkHistory({
    applied: appliedFromSample(upstream.book.writes(), (w) => w.lock),
    grants: rec.grants.map(({ lock, token, owner, leaseId }) => ({ lock, token, owner, leaseId })),
    operations: rec.operations,
  });
}

export { formatViolation };

/**
 * Grants in real-time order: a grant whose answer arrived before another grant of the
 * same key was even requested must carry the lower token. Returns the first breach.
 */
export function grantOrderViolation(grants: readonly TimedGrant[]): string | null {
  const byKey = new Map<string, TimedGrant[]>();
  for (const g of grants) byKey.set(g.lock, [...(byKey.get(g.lock) ?? []), g]);
  for (const [key, gs] of byKey) {
    for (const a of gs) {
      for (const b of gs) {
        if (a.receivedAt < b.sentAt && !(BigInt(a.token) < BigInt(b.token))) {
          return `${key}: token ${b.token} (${b.owner}) granted after ${a.token} (${a.owner}) had been granted`;
        }
      }
    }
  }
  return null;
}

/** Whether the upstream ever applied a write with this client request id. */
export function applied(upstream: SampleUpstream, requestId: string): boolean {
  return upstream.book.writes().some((w) => w.clientRequestId === requestId);
}

/** Polls `probe` until it returns true, at most `attempts` times `everyMs` apart. */
export async function until(
  what: string,
  probe: () => Promise<boolean>,
  attempts = 300,
  everyMs = 100,
): Promise<void> {
  for (let i = 0; i < attempts; i++) {
    if (await probe()) return;
    await sleep(everyMs);
  }
  throw new Error(`gave up waiting for: ${what}`);
}
