/**
 * The events API, the lock list and the status endpoint of a running server
 * (startServer in-process, Redis store, the sample upstream behind a fenced route), and
 * GET /v1/locks paged by prefix on every store.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildControl } from '../../src/control/control-server.js';
import { Issuer } from '../../src/issuer/service.js';
import { EventLog, type FenceEvent } from '../../src/observe/events.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { startSampleUpstream, type SampleUpstream } from '../../src/sample/index.js';
import type { RunningServer } from '../../src/serve.js';
import { pgKindFixture, PG_URL, type PgKindFixture } from '../helpers/pg-kind.js';
import { openSse } from '../helpers/sse.js';
import { startRedisServerWith, type TestServer } from '../helpers/running-server.js';
import { STORE_FIXTURES, type Harness } from '../helpers/stores.js';
import { answerViolations, checkAnswers } from '../helpers/openapi.js';
import { sleep } from '../helpers/wait.js';

interface Lease {
  key: string;
  leaseId: string;
  token: string;
  owner: string;
}

describe('events API on a running server', () => {
  let sample: SampleUpstream;
  let pgKind: PgKindFixture;
  let server: TestServer;
  let srv: RunningServer;
  let dir: string;

  async function post(path: string, body: unknown) {
    const res = await fetch(`${srv.control}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  }

  async function acquire(key: string, owner: string, ttlMs = 60_000): Promise<Lease> {
    const r = await post(`/v1/locks/${encodeURIComponent(key)}/acquire`, { owner, ttlMs });
    expect(r.status).toBe(200);
    return r.body as unknown as Lease;
  }

  async function write(id: string, token: string | null): Promise<number> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (token !== null) headers['fencing-token'] = token;
    const res = await fetch(`${srv.data}/orders/${id}`, { method: 'PUT', headers, body: '{"status":"x"}' });
    await res.arrayBuffer();
    return res.status;
  }

  async function events(query = ''): Promise<{ total: number; oldest: number | null; events: FenceEvent[] }> {
    const res = await fetch(`${srv.control}/v1/events${query}`);
    expect(res.status).toBe(200);
    return (await res.json()) as { total: number; oldest: number | null; events: FenceEvent[] };
  }

  async function eventually(query: string, n: number): Promise<FenceEvent[]> {
    const end = Date.now() + 5000;
    for (;;) {
      const got = (await events(query)).events;
      if (got.length >= n) return got;
      if (Date.now() > end) throw new Error(`expected ${n} events for ${query}, got ${JSON.stringify(got)}`);
      await sleep(20);
    }
  }

  beforeAll(async () => {
    sample = await startSampleUpstream({ port: 0 });
    pgKind = await pgKindFixture();
    await pgKind.sql('CREATE TABLE {s}.orders (id bigint PRIMARY KEY, status text)');
    dir = await mkdtemp(join(tmpdir(), 'fg-events-'));
    const policy = join(dir, 'policy.yaml');
    await writeFile(
      policy,
      [
        'version: 1',
        'upstreams:',
        '  orders:',
        '    kind: http',
        `    url: ${sample.url}`,
        '  shop:',
        '    kind: postgres',
        `    url: ${PG_URL}`,
        `    fenceSchema: ${pgKind.fenceSchema}`,
        'routes:',
        '  - name: order-writes',
        '    methods: [PUT]',
        '    path: /orders/:id',
        '    upstream: orders',
        "    lock: 'order:{id}'",
        '  - name: order-reads',
        '    methods: [GET]',
        '    path: /orders/*',
        '    upstream: orders',
        '  - name: order-rows',
        '    methods: [GET, PUT]',
        '    path: /tables/orders/:id',
        '    upstream: shop',
        `    table: ${pgKind.schema}.orders`,
        '    key: id',
        '    columns: [status]',
        "    lock: 'row:{id}'",
        '',
      ].join('\n'),
    );
    server = await startRedisServerWith(policy, 'fgev');
    srv = server.srv;
  });

  afterAll(async () => {
    await server?.close();
    await sample?.close();
    await pgKind?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('a stale write is an event naming the owner of the presented token; lease troubles are events', async () => {
    const a = await acquire('order:1', 'alice', 150);
    await sleep(300);
    const b = await acquire('order:1', 'bob');
    expect(await write('1', b.token)).toBeLessThan(300);
    expect(await write('1', a.token)).toBe(409);
    expect((await post('/v1/locks/order%3A1/renew', { leaseId: a.leaseId })).status).toBe(409);
    expect((await post('/v1/locks/order%3A1/release', { leaseId: a.leaseId })).status).toBe(409);

    const [stale] = await eventually('?lock=order:1&reason=stale', 1);
    expect(stale).toMatchObject({
      type: 'fenced-write',
      reason: 'stale',
      route: 'order-writes',
      lock: 'order:1',
      token: a.token,
      highest: b.token,
      owner: 'alice',
      enforced: true,
      client: '127.0.0.1',
      method: 'PUT',
      path: '/orders/1',
    });
    expect(Date.parse(stale?.time ?? '')).toBeGreaterThan(0);
    expect((await events('?lock=order:1&type=lease-expired')).events).toMatchObject([
      { route: null, token: a.token, highest: b.token, owner: 'alice', reason: 'expired' },
    ]);
    expect((await events('?lock=order:1&reason=lease-lost')).events).toMatchObject([
      { type: 'renew-failed' },
    ]);
    expect((await events('?lock=order:1&type=release-not-owner')).events).toHaveLength(1);
    // The holder of a token the store never granted is unknown.
    expect(await write('1', '999999999999999999')).toBe(403);
    const [forged] = await eventually('?lock=order:1&reason=forged', 1);
    expect(forged).toMatchObject({ owner: null, token: '999999999999999999' });
  });

  it('a stale write refused inside the database (kind: postgres) is an event with its owner too', async () => {
    const a = await acquire('row:1', 'erin', 150);
    await sleep(300);
    const b = await acquire('row:1', 'frank');
    const put = async (token: string) => {
      const res = await fetch(`${srv.data}/tables/orders/1`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', 'fencing-token': token },
        body: '{"status":"paid"}',
      });
      await res.arrayBuffer();
      return res.status;
    };
    expect(await put(b.token)).toBe(200);
    expect(await put(a.token)).toBe(409);
    const [stale] = await eventually('?lock=row:1&type=fenced-write', 1);
    expect(stale).toMatchObject({
      reason: 'stale',
      route: 'order-rows',
      token: a.token,
      highest: b.token,
      owner: 'erin',
      path: '/tables/orders/1',
    });
  });

  it('filters by route, lock, reason, type and since; limit caps the answer', async () => {
    await write('2', null);
    await write('2', null);
    const l = await acquire('order:3', 'carol');
    await write('3', l.token);
    await write('3', '1'); // below the key floor: stale
    const missing = await eventually('?route=order-writes&lock=order:2&reason=missing', 2);
    expect(missing.every((e) => e.reason === 'missing' && e.token === null && e.owner === null)).toBe(true);
    expect(missing[0]!.id).toBeGreaterThan(missing[1]!.id); // newest first
    const stale3 = await eventually('?lock=order:3', 1);
    expect(stale3.map((e) => e.reason)).toEqual(['stale']);
    const all = await events();
    expect(all.total).toBeGreaterThanOrEqual(all.events.length);
    const since = missing[1]!.id;
    const after = (await events(`?since=${since}`)).events;
    expect(after.length).toBeGreaterThan(0);
    expect(after.every((e) => e.id > since)).toBe(true);
    expect((await events('?limit=1')).events).toHaveLength(1);
    expect(
      (await events(`?since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`)).events,
    ).toEqual([]);
    expect((await events('?reason=missing,stale&lock=order:2')).events).toHaveLength(2);
    expect((await events('?route=order-reads')).events).toEqual([]);
  });

  it.each([
    ['/v1/events?reason=bogus', 'reason'],
    ['/v1/events?since=yesterday', 'since'],
    ['/v1/events?limit=0', 'limit'],
    ['/v1/events?lock=a&lock=b', 'lock'],
    ['/v1/events?owner=alice', 'owner'],
    ['/v1/events/stream?type=nope', 'type'],
    ['/v1/locks?cursor=%%%', 'cursor'],
    ['/v1/locks?limit=5000', 'limit'],
  ])('GET %s is 400 invalid-query naming %s', async (path, parameter) => {
    const res = await fetch(`${srv.control}${path}`);
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await res.json()).toMatchObject({ type: 'urn:fencegate:invalid-query', status: 400, parameter });
  });

  it('a bad Last-Event-ID is 400 too', async () => {
    const res = await fetch(`${srv.control}/v1/events/stream`, { headers: { 'last-event-id': 'abc' } });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ parameter: 'Last-Event-ID' });
  });

  it('streams events live (SSE), and a client resumes with Last-Event-ID without losing any', async () => {
    const l = await acquire('order:4', 'dave');
    await write('4', l.token);
    const first = await openSse(`${srv.control}/v1/events/stream?lock=order:4`);
    expect(first.status).toBe(200);
    expect(first.headers['content-type']).toMatch(/^text\/event-stream/);
    await write('4', '1');
    await write('4', null);
    await first.waitFor((f) => f.length >= 2, 'two live events');
    first.close();
    const seen = first.events<FenceEvent>();
    expect(seen.map((e) => e.reason)).toEqual(['stale', 'missing']);
    expect(first.frames.map((f) => f.id)).toEqual(seen.map((e) => String(e.id)));

    await write('5', null); // another lock: filtered out
    await write('4', '2');
    await write('4', null);
    const resumed = await openSse(`${srv.control}/v1/events/stream?lock=order:4`, {
      'last-event-id': String(seen[0]!.id),
    });
    await resumed.waitFor((f) => f.length >= 3, 'the replay after Last-Event-ID');
    const replay = resumed.events<FenceEvent>();
    expect(replay.map((e) => e.id)).toEqual([...replay.map((e) => e.id)].sort((x, y) => x - y));
    expect(replay[0]!.id).toBe(seen[1]!.id);
    expect(replay.map((e) => e.reason)).toEqual(['missing', 'stale', 'missing']);
    expect(replay.every((e) => e.lock === 'order:4')).toBe(true);
    await write('4', null);
    await resumed.waitFor((f) => f.length >= 4, 'a live event after the replay');
    resumed.close();
  });

  it('GET /v1/status: store health and breaker, upstreams with kind and breaker, routes in force', async () => {
    const res = await fetch(`${srv.control}/v1/status`);
    expect(res.status).toBe(200);
    const s = (await res.json()) as Record<string, unknown>;
    expect(s).toMatchObject({
      store: { kind: 'redis', ok: true, breaker: 'closed' },
      upstreams: [
        { name: 'orders', kind: 'http', breaker: 'closed' },
        { name: 'shop', kind: 'postgres', breaker: null },
      ],
      routes: [
        {
          name: 'order-writes',
          methods: ['PUT'],
          path: '/orders/:id',
          kind: 'http',
          lock: 'order:{id}',
          fencing: { check: 'token', enforce: true },
        },
        { name: 'order-reads', lock: null, fencing: null },
        {
          name: 'order-rows',
          kind: 'postgres',
          lock: 'row:{id}',
          fencing: { check: 'token', enforce: true },
        },
      ],
    });
  });

  it('serves the dashboard with a strict Content-Security-Policy', async () => {
    const page = await fetch(`${srv.control}/dashboard`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    const csp = page.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    const html = await page.text();
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/); // no inline script
    expect(html).not.toMatch(/\sstyle=|\son[a-z]+=/i);
    for (const asset of ['/dashboard/app.js', '/dashboard/style.css']) {
      const res = await fetch(`${srv.control}${asset}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-security-policy')).toBe(csp);
    }
    const js = await (await fetch(`${srv.control}/dashboard/app.js`)).text();
    expect(js).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
  });
});

describe.each(STORE_FIXTURES)('GET /v1/locks on $name', (fixture) => {
  let h: Harness;
  let control: Awaited<ReturnType<typeof buildControl>>;
  let issuer: Issuer;
  beforeEach(async () => {
    h = await fixture.open();
    const metrics = createMetrics({ defaultMetrics: false });
    issuer = new Issuer(h.store, metrics);
    control = checkAnswers(
      await buildControl({
        store: h.store,
        issuer,
        metrics,
        events: new EventLog(),
        defaultTtlMs: 10_000,
        logLevel: 'silent',
      }),
    );
  });
  afterEach(async () => {
    issuer.shutdown();
    await control.close();
    await h.close();
  });

  it('pages the held locks by cursor, filtered by key prefix, with holder, token, fence and lease left', async () => {
    const keys = ['jobs/a', 'jobs/b', 'jobs/c', 'jobs/d', 'jobs/e', 'other/x'];
    const tokens = new Map<string, string>();
    for (const key of keys) {
      const res = await control.inject({
        method: 'POST',
        url: `/v1/locks/${encodeURIComponent(key)}/acquire`,
        payload: { owner: `w-${key}`, ttlMs: 30_000 },
      });
      expect(res.statusCode).toBe(200);
      tokens.set(key, res.json<{ token: string }>().token);
    }
    const seen: Record<string, unknown>[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const q = new URLSearchParams({ prefix: 'jobs/', limit: '2' });
      if (cursor !== null) q.set('cursor', cursor);
      const res = await control.inject({ method: 'GET', url: `/v1/locks?${q}` });
      expect(res.statusCode).toBe(200);
      const body = res.json<{ locks: Record<string, unknown>[]; next: string | null }>();
      expect(body.locks.length).toBeLessThanOrEqual(2);
      seen.push(...body.locks);
      cursor = body.next;
      pages += 1;
    } while (cursor !== null && pages < 10);
    expect(pages).toBe(3);
    expect(seen.map((l) => l.key)).toEqual(['jobs/a', 'jobs/b', 'jobs/c', 'jobs/d', 'jobs/e']);
    for (const l of seen) {
      const key = l.key as string;
      expect(l).toMatchObject({
        held: true,
        owner: `w-${key}`,
        token: tokens.get(key),
        highest: null,
        waiters: 0,
      });
      expect(l.leaseRemainingMs).toBeGreaterThan(0);
      expect(l.leaseRemainingMs).toBeLessThanOrEqual(30_000);
    }
    const past = Buffer.from('jobs/z').toString('base64url');
    const end = await control.inject({ method: 'GET', url: `/v1/locks?prefix=jobs/&cursor=${past}` });
    expect(end.json()).toEqual({ locks: [], next: null });
  });
});

describe('docs/openapi.json', () => {
  it('describes every answer this file got from the control API', () => {
    expect(answerViolations()).toEqual([]);
  });
});
