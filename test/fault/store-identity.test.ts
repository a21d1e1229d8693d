/**
 * When the store forgets, is replaced or rewinds under running gateways
 * (docs/adr/0019-store-identity.md, docs/operations.md "Backup and restore"): no token is
 * issued twice, no lower token is applied after a higher one, and writes already
 * delivered are applied before the next owner's. Each case ends with the history
 * checker (duplicate-grant, grant-regression, stale-owner, token-regression …).
 *
 * 1. Embedded, in-place restore under a running `serve` (`rm -rf DIR; cp -a BACKUP DIR`):
 *    the running process fails closed (it serves a deleted file); a process started on
 *    the directory finds the data file is not the one that verified the epoch, and starts
 *    a new epoch above everything before.
 * 2. Postgres, a pg_dump taken earlier restored (with --clean) while `serve` runs: its next
 *    grant finds the tables replaced (SQLSTATE FGRST), bumps the epoch above every token
 *    it saw, and grants above it.
 * 3. Redis, a replica promoted behind a stable endpoint without the last grant: the
 *    gateway reconnects to a server that took over from another master (master_replid2)
 *    and starts a new epoch above every token it saw.
 * 4. Redis restarted without AOF (loading an older RDB): the durability check on the
 *    reconnection fails the store closed (503, /readyz says why); restarted with AOF
 *    always again, it recovers, and B (whose grant the AOF kept) writes on.
 * 5. Redis FLUSHALL while A's write sits at a 3 s upstream: both gateways find the store
 *    reset and hold fenced writes for the route's lock-delay, so B's write reaches the
 *    upstream after A's was applied.
 */
import { execFile } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { formatViolation } from '../checker/index.js';
import { tempDir, type FencegateProcess } from '../helpers/procs.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import {
  checkRun,
  HistoryRecorder,
  opId,
  PG_URL,
  SESSION_TTL,
  useFaultSite,
  type GatedUpstream,
  type WriteResult,
} from './harness/index.js';
import { startTcpProxy } from './lib/tcp-proxy.js';
import { sleep } from '../helpers/wait.js';
import { until } from './lib/workload.js';

const run = promisify(execFile);
const BOUND_MS = 4000;
const AOF_ALWAYS = ['--appendonly', 'yes', '--appendfsync', 'always'];

const site = useFaultSite({ serveArgs: SESSION_TTL });
let upstream: GatedUpstream;

beforeAll(async () => {
  upstream = await site.startUpstream();
  await site.docsPolicy(BOUND_MS);
});

/** `fencegate serve` on the store `args` name, with the policy and SESSION_TTL; killed after all. */
const serve = (args: string[]): Promise<FencegateProcess> => site.serve(args);

class Scenario {
  readonly history = new HistoryRecorder();
  readonly tag = Math.random().toString(36).slice(2, 8);
  readonly lock = `doc:${this.tag}`;

  async grant(control: string, owner: string, ttlMs = 60_000): Promise<string> {
    const l = await this.history.acquire(control, this.lock, `${owner}-${this.tag}`, {
      ttlMs,
      waitMs: 10_000,
    });
    expect(l, `${owner} granted`).not.toBeNull();
    return l?.fencingToken as string;
  }

  write(
    data: string,
    token: string,
    owner: string,
    query = '',
  ): Promise<WriteResult> & { requestId: string } {
    const requestId = opId(`${owner}-${this.tag}`);
    const p = this.history.write({
      data,
      path: `/docs/orders/${this.tag}${query}`,
      lock: this.lock,
      token,
      writer: `${owner}-${this.tag}`,
      requestId,
      timeoutMs: 60_000,
    });
    return Object.assign(p, { requestId });
  }

  /** Retries on 503 (the store is failing closed, or a lock-delay holds the route) until answered otherwise. */
  async writeUntilAnswered(
    data: string,
    token: string,
    owner: string,
  ): Promise<{ result: WriteResult; requestId: string }> {
    const end = Date.now() + 60_000;
    for (;;) {
      const w = this.write(data, token, owner);
      const result = await w;
      if (result.status !== 503 || Date.now() > end) return { result, requestId: w.requestId };
      await sleep(200);
    }
  }

  async expectClean(): Promise<void> {
    const { result } = await checkRun(upstream.url, this.history, { only: (w) => w.lock === this.lock });
    expect(result.ok, formatViolation(result)).toBe(true);
  }
}

async function readyz(g: FencegateProcess): Promise<{ status: number; text: string }> {
  const res = await fetch(`${g.control}/readyz`, { signal: AbortSignal.timeout(10_000) });
  return { status: res.status, text: await res.text() };
}

describe('store identity and resets', () => {
  it('1. embedded: a directory restored in place under a running serve', async () => {
    const dir = await tempDir('fg-identity-');
    const backup = `${dir}-backup`;
    await run('mkdir', ['-p', backup]);
    site.defer(() => rm(dir, { recursive: true, force: true }));
    site.defer(() => rm(backup, { recursive: true, force: true }));
    const store = join(dir, 'store');
    const s = new Scenario();
    const g1 = await serve(['--store', store]);
    const a = await s.grant(g1.control, 'a', 1000);
    expect((await s.write(g1.data, a, 'a')).status).toBe(201);
    await sleep(50);
    await run('cp', ['-a', store, backup]); // the backup holds A's grant only
    await sleep(1100); // A's lease lapses
    const b = await s.grant(g1.control, 'b');
    expect((await s.write(g1.data, b, 'b')).status).toBe(200);
    // The restore, while g1 runs.
    await rm(store, { recursive: true, force: true });
    await run('cp', ['-a', join(backup, 'store'), store]);
    // g1 serves a deleted file: it fails closed, and says why (B's token, which it would
    // admit; after B's admission hold, which could admit it as if it had come earlier).
    await sleep(300);
    expect((await s.write(g1.data, b, 'b')).status).toBe(503);
    await until('g1 not ready', async () => (await readyz(g1)).status === 503);
    expect((await readyz(g1)).text).toMatch(/data file was replaced/);
    // A process started now reads the restored file and starts a new epoch before serving.
    const g2 = await serve(['--store', store]);
    const c = await s.grant(g2.control, 'c');
    expect(BigInt(c)).toBeGreaterThan(BigInt(b));
    const old = await s.writeUntilAnswered(g2.data, a, 'a');
    expect(old.result.status).toBe(409); // below the new floor
    expect((await s.write(g2.data, c, 'c')).status).toBe(200);
    await s.expectClean();
  }, 120_000);

  it('2. postgres: a pg_dump taken earlier restored while serve runs', async () => {
    const schema = `fgident_${Math.random().toString(36).slice(2, 8)}`;
    const dumpDir = await tempDir('fg-pgdump-');
    site.defer(() => rm(dumpDir, { recursive: true, force: true }));
    site.defer(() => run('psql', [PG_URL, '-c', `DROP SCHEMA IF EXISTS "${schema}" CASCADE`]));
    const s = new Scenario();
    const g1 = await serve(['--store', PG_URL, '--store-namespace', schema]);
    const a = await s.grant(g1.control, 'a', 1000);
    expect((await s.write(g1.data, a, 'a')).status).toBe(201);
    const dump = join(dumpDir, 'dump.sql');
    await run('pg_dump', ['--clean', '--if-exists', '-n', schema, '-f', dump, PG_URL]);
    await sleep(1100);
    const b = await s.grant(g1.control, 'b');
    expect((await s.write(g1.data, b, 'b')).status).toBe(200);
    await run('psql', ['-v', 'ON_ERROR_STOP=1', '-q', '-f', dump, PG_URL]);
    // The restored tables' lease is A's (lapsed) and their last token A's: without the
    // identity check, C would be granted B's token again.
    const c = await s.grant(g1.control, 'c');
    expect(BigInt(c)).toBeGreaterThan(BigInt(b));
    const old = await s.writeUntilAnswered(g1.data, b, 'b');
    expect(old.result.status).toBe(409);
    const next = await s.writeUntilAnswered(g1.data, c, 'c');
    // On failure, what the gateway said and logged (a hold that never ended was seen once in CI).
    expect(next.result.status, `${JSON.stringify(next.result.body)}\n${g1.output().slice(-3000)}`).toBe(200);
    await s.expectClean();
  }, 120_000);

  it('3. redis: a replica promoted behind a stable endpoint without the last grant', async () => {
    const primary: RedisServer = await startRedisServer(AOF_ALWAYS);
    site.defer(() => primary.stop());
    const replica: RedisServer = await startRedisServer([
      ...AOF_ALWAYS,
      '--replicaof',
      '127.0.0.1',
      String(primary.port),
    ]);
    site.defer(() => replica.stop());
    const proxy = await startTcpProxy(primary.port);
    site.defer(() => proxy.close());
    const s = new Scenario();
    const g = await serve(['--store', proxy.url('redis')]);
    const a = await s.grant(g.control, 'a', 1000);
    expect((await s.write(g.data, a, 'a')).status).toBe(201);
    // The replica has A's grant, then stops following the primary (as a lagging replica would).
    const r = new Redis(replica.url, { lazyConnect: true });
    await r.connect();
    site.defer(async () => r.disconnect());
    await until('replica in sync', async () => (await r.hget(`fg:{${s.lock}}:ctr`, 'issued')) === a);
    await r.replicaof('NO', 'ONE');
    await sleep(1100);
    const b = await s.grant(g.control, 'b');
    expect((await s.write(g.data, b, 'b')).status).toBe(200);
    // The primary dies; the endpoint now leads to the promoted replica, which never saw B's grant.
    await primary.kill();
    proxy.switchTo(replica.port);
    // A failover takes longer than an admission hold (a write B made just before the
    // failover would be admitted by it: as if it had arrived that much earlier).
    await sleep(300);
    const c = await s.writeUntilAnswered(g.data, b, 'b'); // reconnects through the endpoint
    expect(c.result.status).toBe(409); // B's token is below the floor raised above it
    const next = await s.grant(g.control, 'c');
    expect(BigInt(next)).toBeGreaterThan(BigInt(b));
    expect((await s.writeUntilAnswered(g.data, next, 'c')).result.status).toBe(200);
    await s.expectClean();
  }, 120_000);

  it('4. redis: restarted without AOF from an older RDB, the store fails closed; with AOF again it recovers, nothing lost', async () => {
    const redis: RedisServer = await startRedisServer(AOF_ALWAYS);
    site.defer(() => redis.stop());
    const s = new Scenario();
    const g = await serve(['--store', redis.url]);
    const r = new Redis(redis.url, { lazyConnect: true });
    await r.connect();
    const a = await s.grant(g.control, 'a', 1000);
    expect((await s.write(g.data, a, 'a')).status).toBe(201);
    await r.save(); // an RDB with A's grant only
    r.disconnect();
    await sleep(1100);
    const b = await s.grant(g.control, 'b', 3000);
    expect((await s.write(g.data, b, 'b')).status).toBe(200);
    await redis.kill();
    await redis.start(['--appendonly', 'no']);
    // Not durable: nothing is granted or admitted, and /readyz says why.
    await until('not ready, saying why', async () => /appendonly is \\"no\\"/.test((await readyz(g)).text));
    const refused = await fetch(`${g.control}/v1/locks/${encodeURIComponent(s.lock)}/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ owner: 'x', ttlMs: 1000 }),
    });
    expect(refused.status).toBe(503);
    expect((await s.write(g.data, b, 'b')).status).toBe(503);
    // AOF always again: the AOF has B's grant, nothing acknowledged was lost, B writes on.
    await redis.kill();
    await redis.start(AOF_ALWAYS);
    await until('ready again', async () => (await readyz(g)).status === 200);
    expect((await s.writeUntilAnswered(g.data, b, 'b')).result.status).toBe(200);
    const c = await s.grant(g.control, 'c'); // once B's lease lapses
    expect(BigInt(c)).toBeGreaterThan(BigInt(b));
    const written = await s.writeUntilAnswered(g.data, c, 'c');
    expect(written.result.status, `${JSON.stringify(written.result.body)}\n${g.output().slice(-3000)}`).toBe(
      200,
    );
    await s.expectClean();
  }, 120_000);

  it('5. redis: FLUSHALL while a write sits at its upstream; the next owner waits for it', async () => {
    const redis: RedisServer = await startRedisServer(AOF_ALWAYS);
    site.defer(() => redis.stop());
    const s = new Scenario();
    const g1 = await serve(['--store', redis.url]);
    const g2 = await serve(['--store', redis.url]);
    const a = await s.grant(g1.control, 'a', 60_000);
    const tA = s.write(g1.data, a, 'a', '?delayMs=3000');
    await until('A at the upstream', async () => upstream.indexOf('received', tA.requestId) >= 0);
    await sleep(300);
    const r = new Redis(redis.url, { lazyConnect: true });
    await r.connect();
    await r.flushall();
    r.disconnect();
    const b = await s.grant(g2.control, 'b'); // the lock is free: the store forgot A's lease
    const tB = await s.writeUntilAnswered(g2.data, b, 'b');
    expect(tB.result.status).toBe(200);
    expect(upstream.indexOf('applied', tA.requestId)).toBeGreaterThanOrEqual(0);
    expect(upstream.indexOf('applied', tA.requestId)).toBeLessThan(
      upstream.indexOf('received', tB.requestId),
    );
    await tA;
    const events = (await (await fetch(`${g2.control}/v1/events?type=lock-delay`)).json()) as {
      events: { reason: string }[];
    };
    expect(events.events.some((e) => e.reason === 'store-reset')).toBe(true);
    await s.expectClean();
  }, 120_000);
});
