/**
 * A full disk under the embedded store is an outage of writes, not of the process
 * (docs/stores-embedded.md, "Full or read-only disk"). A real `fencegate serve` runs on
 * an embedded store in a 2 MiB tmpfs; the test fills it. Grants then get 503
 * store-unavailable and fenced writes 503 fence-unavailable (with the fenced-write
 * `unavailable` event and fencegate_store_errors_total), while reads through the
 * gateway, an unfenced route and /healthz keep answering and /readyz answers 503 naming
 * "disk full: ENOSPC"; the process never exits. Freeing the space brings /readyz, grants
 * and fenced writes back in the same process. Restarted on a disk that is still full,
 * `serve` starts (it writes no file it already has) and serves reads, recovers as well,
 * and a graceful stop on the full disk exits 0. Every grant acknowledged survives all of
 * it, read back by a last process.
 *
 * LMDB reuses the pages a commit freed once no reader holds the snapshot before it, so on
 * a full disk the writes that fit in those pages would still go through, and which ones do
 * depends on page layout. To make every write need new room (the outage total, as it is
 * once the free pages run out), the test holds a read transaction in its own process, as
 * any reader of the directory may. Needs root (mount): a sandbox that cannot mount fails,
 * it is not skipped. Runs the built CLI: `npm run build` first.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, existsSync, openSync, rmSync, writeSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { open, type RootDatabase } from 'lmdb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricValue } from '../helpers/e2e.js';
import { startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { writePolicy } from './harness/index.js';

const BUILT = fileURLToPath(new URL('../../dist/cli.js', import.meta.url));
const JSON_HEADERS = { 'content-type': 'application/json' };

let mnt = '';
let mounted = false;
let upstream: Server;
let upstreamUrl = '';
/** The bodies of the PUTs the upstream applied, by path. */
const applied = new Map<string, string>();
let policy = { dir: '', file: '' };
const gateways: FencegateProcess[] = [];
let reader: RootDatabase | null = null;

beforeAll(async () => {
  expect(existsSync(BUILT), `${BUILT} is missing: run npm run build first`).toBe(true);
  mnt = await tempDir('fg-disk-full-');
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', mnt]);
  mounted = true;
  upstream = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      if (req.method === 'PUT') applied.set(req.url ?? '', body);
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({ method: req.method, url: req.url, stored: applied.get(req.url ?? '') ?? null }),
      );
    });
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  policy = await writePolicy({ app: { url: upstreamUrl, timeoutMs: 3000 } }, [
    { name: 'docs-write', methods: ['PUT'], path: '/docs/:id', upstream: 'app', lock: 'doc:{id}' },
    { name: 'docs-read', methods: ['GET'], path: '/docs/:id', upstream: 'app' },
    { name: 'notes', methods: ['PUT', 'GET'], path: '/notes/:id', upstream: 'app' },
  ]);
});

afterAll(async () => {
  for (const g of gateways) await g.kill().catch(() => undefined);
  await reader?.close().catch(() => undefined);
  if (mounted) execFileSync('umount', ['-l', mnt]);
  if (mnt) await rm(mnt, { recursive: true, force: true });
  await new Promise((r) => upstream?.close(r));
  if (policy.dir) await rm(policy.dir, { recursive: true, force: true });
}, 30_000);

const storeDir = () => join(mnt, 'store');
const fillFile = () => join(mnt, 'fill');

/** Writes zeros into the tmpfs until it is full (ENOSPC); returns the bytes written. */
function fillDisk(): number {
  const fd = openSync(fillFile(), 'a');
  const chunk = Buffer.alloc(4096);
  let written = 0;
  try {
    for (;;) written += writeSync(fd, chunk);
  } catch (err) {
    expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
  } finally {
    closeSync(fd);
  }
  return written;
}

async function serve(): Promise<FencegateProcess> {
  const g = await startFencegate([
    '--store',
    storeDir(),
    '--policies',
    policy.file,
    '--store-reset-timeout-ms',
    '300',
  ]);
  gateways.push(g);
  return g;
}

interface Grant {
  key: string;
  leaseId: string;
  token: string;
}

async function acquire(
  g: FencegateProcess,
  key: string,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${g.control}/v1/locks/${encodeURIComponent(key)}/acquire`, {
    method: 'POST',
    headers: JSON_HEADERS,
    body: JSON.stringify({ owner: `owner-of-${key}`, ttlMs: 120_000 }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function put(
  g: FencegateProcess,
  path: string,
  token?: string,
): Promise<{ status: number; body: string }> {
  const res = await fetch(`${g.data}${path}`, {
    method: 'PUT',
    headers: { ...JSON_HEADERS, ...(token === undefined ? {} : { 'fencing-token': token }) },
    body: JSON.stringify({ path, token: token ?? null }),
  });
  return { status: res.status, body: await res.text() };
}

async function get(url: string): Promise<{ status: number; body: string }> {
  const res = await fetch(url);
  return { status: res.status, body: await res.text() };
}

/** Every acknowledged grant is still recorded: its lease holds the lock with its token (a read). */
async function expectGrantsKept(g: FencegateProcess, grants: Grant[]): Promise<void> {
  for (const grant of grants) {
    const res = await get(`${g.control}/v1/locks/${encodeURIComponent(grant.key)}`);
    expect(res.status, res.body).toBe(200);
    const state = JSON.parse(res.body) as { held: boolean; token: string; issued: string };
    expect(state, `grant ${grant.key} ${grant.token} lost`).toMatchObject({ held: true, token: grant.token });
    expect(BigInt(state.issued)).toBe(BigInt(grant.token));
  }
}

/**
 * Grants on new keys until one is refused (the first commit that needs room the disk has
 * not got: the pages free when the snapshot was pinned may take a few), and returns that
 * refusal; the grants acknowledged before it are added to `acked`.
 */
async function growUntilRefused(
  g: FencegateProcess,
  prefix: string,
  acked: Grant[],
): Promise<{ status: number; body: Record<string, unknown> }> {
  for (let i = 0; i < 200; i++) {
    const key = `doc:${prefix}-${i}`;
    const r = await acquire(g, key);
    if (r.status !== 200) return r;
    acked.push({ key, leaseId: r.body.leaseId as string, token: r.body.token as string });
  }
  throw new Error('the disk never refused a grant');
}

/** Holds a read snapshot of the store (see the top of the file); null closes it. */
function pinSnapshot(on: boolean): void {
  if (on) {
    reader = open({ path: join(storeDir(), 'fencegate.mdb'), maxDbs: 7 * 16 + 1, compression: false });
    reader.useReadTransaction();
    return;
  }
  void reader?.close();
  reader = null;
}

describe('a full disk under the embedded store', () => {
  it('refuses writes with 503, keeps reads, probes and the process, and recovers without a restart', async () => {
    const g = await serve();
    const acked: Grant[] = [];
    const grant = async (key: string): Promise<Grant> => {
      const r = await acquire(g, key);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      const got = { key, leaseId: r.body.leaseId as string, token: r.body.token as string };
      acked.push(got);
      return got;
    };
    const a = await grant('doc:a');
    expect((await put(g, '/docs/a', a.token)).status).toBe(200);
    expect((await put(g, '/notes/n0')).status).toBe(200);

    pinSnapshot(true);
    const filled = fillDisk();
    expect(filled).toBeGreaterThan(0);

    // Grow the store until the disk refuses (the first commit needing room fails).
    const errorsBefore = await metricValue(g.control, 'fencegate_store_errors_total', { op: 'tryAcquire' });
    const refused = await growUntilRefused(g, 'grow', acked);
    expect(refused).toMatchObject({ status: 503, body: { type: 'urn:fencegate:store-unavailable' } });

    // The outage, for 3 s: writes refused, everything else answering, the same process.
    const until = Date.now() + 3000;
    let rounds = 0;
    let readyDetail = '';
    while (Date.now() < until) {
      rounds++;
      const fenced = await put(g, '/docs/a', a.token);
      expect(fenced.status, fenced.body).toBe(503);
      expect(JSON.parse(fenced.body)).toMatchObject({ type: 'urn:fencegate:fence-unavailable' });
      const granted = await acquire(g, `doc:during-${rounds}`);
      expect(granted.status, JSON.stringify(granted.body)).toBe(503);
      expect(granted.body).toMatchObject({ type: 'urn:fencegate:store-unavailable' });
      const read = await get(`${g.data}/docs/a`);
      expect(read.status, read.body).toBe(200);
      expect(JSON.parse(read.body)).toMatchObject({
        method: 'GET',
        stored: JSON.stringify({ path: '/docs/a', token: a.token }),
      });
      expect((await put(g, `/notes/n${rounds}`)).status).toBe(200);
      expect((await get(`${g.control}/healthz`)).status).toBe(200);
      const ready = await get(`${g.control}/readyz`);
      expect(ready.status, ready.body).toBe(503);
      readyDetail = (JSON.parse(ready.body) as { store: { detail: string } }).store.detail;
      expect(readyDetail).toMatch(/disk full: ENOSPC/);
      expect(g.proc.exitCode).toBeNull();
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(rounds).toBeGreaterThan(3);
    expect(
      await metricValue(g.control, 'fencegate_store_errors_total', { op: 'tryAcquire' }),
    ).toBeGreaterThan(errorsBefore + rounds - 1);
    expect(await metricValue(g.control, 'fencegate_store_errors_total', { op: 'admit' })).toBeGreaterThan(0);
    const events = (await (
      await fetch(`${g.control}/v1/events?type=fenced-write&reason=unavailable`)
    ).json()) as { events: { reason: string; lock: string }[] };
    expect(events.events.length).toBeGreaterThan(0);
    expect(events.events[0]).toMatchObject({ reason: 'unavailable', lock: 'doc:a' });
    await expectGrantsKept(g, acked);

    // Space returns: /readyz, grants and fenced writes recover in the same process.
    rmSync(fillFile());
    const freedAt = Date.now();
    for (;;) {
      const ready = await get(`${g.control}/readyz`);
      if (ready.status === 200) break;
      expect(Date.now() - freedAt, `readyz still ${ready.body}`).toBeLessThan(10_000);
      await new Promise((r) => setTimeout(r, 100));
    }
    const readyAfterMs = Date.now() - freedAt;
    const b = await grant('doc:b');
    expect(BigInt(b.token)).toBeGreaterThan(BigInt(a.token));
    let fenced = await put(g, '/docs/b', b.token);
    for (let i = 0; fenced.status === 503 && i < 50; i++) {
      // The gateway's store circuit, opened by the outage, lets a probe through after 300 ms.
      await new Promise((r) => setTimeout(r, 100));
      fenced = await put(g, '/docs/b', b.token);
    }
    expect(fenced.status, fenced.body).toBe(200);
    expect(applied.get('/docs/b')).toBe(JSON.stringify({ path: '/docs/b', token: b.token }));
    expect((await put(g, '/docs/a', a.token)).status).toBe(200);
    expect(g.proc.exitCode).toBeNull();
    await expectGrantsKept(g, acked);
    expect(g.output()).not.toMatch(/unhandled|uncaught/i);

    // Restarted on a disk that is still full: it starts, and serves reads.
    expect(await g.stop()).toBe(0);
    fillDisk();
    const again = await serve();
    expect((await get(`${again.data}/docs/a`)).status).toBe(200);
    expect((await put(again, '/notes/after-restart')).status).toBe(200);
    // A commit that fits in pages LMDB freed earlier succeeds on a full disk: the readiness
    // probe (at most once a second) may find room between a refusal and the look at
    // /readyz on a loaded machine; then the next refusal is looked at.
    let ready = { status: 0, body: '' };
    for (let i = 0; i < 5 && ready.status !== 503; i++) {
      const refusedAgain = await growUntilRefused(again, `restarted-full-${i}`, acked);
      expect(refusedAgain).toMatchObject({ status: 503, body: { type: 'urn:fencegate:store-unavailable' } });
      ready = await get(`${again.control}/readyz`);
    }
    expect(ready.status, ready.body).toBe(503);
    expect(ready.body).toMatch(/disk full: ENOSPC/);
    await expectGrantsKept(again, acked);
    expect(again.proc.exitCode).toBeNull();

    // And it recovers too once there is room.
    rmSync(fillFile());
    pinSnapshot(false);
    let late = await acquire(again, 'doc:after-restart');
    for (let i = 0; late.status !== 200 && i < 50; i++) {
      await new Promise((r) => setTimeout(r, 100));
      late = await acquire(again, 'doc:after-restart');
    }
    expect(late.status, JSON.stringify(late.body)).toBe(200);
    acked.push({
      key: 'doc:after-restart',
      leaseId: late.body.leaseId as string,
      token: late.body.token as string,
    });
    expect((await get(`${again.control}/readyz`)).status).toBe(200);

    // A graceful stop while the disk is full (its session cannot be ended in the store) exits 0.
    pinSnapshot(true);
    fillDisk();
    expect(await growUntilRefused(again, 'before-stop', acked)).toMatchObject({ status: 503 });
    expect(await again.stop()).toBe(0);
    expect(again.output()).not.toMatch(/unhandled|uncaught/i);
    rmSync(fillFile());
    pinSnapshot(false);
    const last = await serve();
    await expectGrantsKept(last, acked);
    console.log(
      `disk full: ${filled} bytes of fill; ${acked.length} grants acknowledged, all kept; ` +
        `${rounds} outage rounds; readyz said: ${readyDetail}; /readyz 200 again ${readyAfterMs} ms after the space came back`,
    );
  }, 120_000);
});
