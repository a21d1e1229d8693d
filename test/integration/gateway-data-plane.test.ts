/**
 * What the data plane (on node:http, not fastify's request cycle) must still do that
 * fastify used to do for it: answer 503 with Connection: close to requests arriving on
 * open connections while the gateway closes, serve app.inject() the same way as a
 * socket, forward bodies fastify would have refused to parse, and turn what a step throws
 * into a problem (or a cut answer), never into an unhandled error.
 */
import { createServer } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { pino } from 'pino';
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import {
  mint,
  ordersPolicy,
  startGateway,
  startUpstream,
  type TestGateway,
} from '../helpers/gateway-harness.js';
import { ProblemError } from '../../src/errors.js';
import { AccessRecorder } from '../../src/gateway/access.js';
import { DataPlane } from '../../src/gateway/data-plane.js';
import type { Exchange } from '../../src/gateway/exchange.js';
import { Idempotency } from '../../src/gateway/idempotency.js';
import type { KindRuntimes } from '../../src/gateway/runtimes.js';
import { createMetrics } from '../../src/observe/metrics.js';
import type { PolicyHolder } from '../../src/policy/index.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { sleep } from '../helpers/wait.js';

const started: { close(): Promise<void> }[] = [];

afterEach(async () => {
  for (const s of started.splice(0).reverse()) await s.close();
});

async function gatewayWith(store: MemoryStore, hold: { release: (() => void) | null }): Promise<TestGateway> {
  const upstream = await startUpstream((req, res) => {
    const answer = () => res.writeHead(200, { 'content-length': '2' }).end('ok');
    if (req.url?.includes('slow') === true) hold.release = answer;
    else answer();
  });
  started.push(upstream);
  const gateway = await startGateway({ store, policy: ordersPolicy(upstream.url) });
  started.push(gateway);
  return gateway;
}

describe('the data plane', () => {
  it('while closing, a request on an open connection gets 503 with Connection: close; the one in flight completes', async () => {
    const hold: { release: (() => void) | null } = { release: null };
    const gateway = await gatewayWith(new MemoryStore(), hold);
    const socket = connect(gateway.port, '127.0.0.1');
    let received = '';
    socket.on('data', (d: Buffer) => (received += d.toString('latin1')));
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.write('GET /orders/slow HTTP/1.1\r\nHost: x\r\n\r\n');
    while (hold.release === null) await sleep(5);

    const closing = gateway.app.close();
    while (gateway.app.server.listening) await sleep(5);
    socket.write('GET /orders/2 HTTP/1.1\r\nHost: x\r\n\r\n');
    await sleep(50);
    hold.release();
    await closed;
    await closing;

    const statuses = [...received.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    expect(statuses).toEqual([200, 503]);
    const second = received.slice(received.lastIndexOf('HTTP/1.1 '));
    expect(second.toLowerCase()).toContain('connection: close');
  });

  it('inject() is served by the same steps as a socket: routed, fenced, forwarded', async () => {
    const store = new MemoryStore();
    const gateway = await gatewayWith(store, { release: null });
    const older = await mint(store, 'order:7');
    const newer = await mint(store, 'order:7');
    const put = (token: bigint) =>
      gateway.app.inject({
        method: 'PUT',
        url: '/orders/7',
        // No body: inject()'s socket is not a net.Socket the upload watch can time.
        headers: { 'fencing-token': String(token) },
      });
    const res = await put(newer.token);
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe('ok');
    const stale = await put(older.token);
    expect(stale.statusCode).toBe(409);
    expect(stale.json()).toMatchObject({ type: 'urn:fencegate:stale-token' });
    const counted = gateway.metrics.requestsOf('order-writes');
    expect([counted[2]?.n, counted[4]?.n]).toEqual([1, 1]);
  });

  it('forwards a body whose Content-Type fastify could not parse: the upstream judges it', async () => {
    const store = new MemoryStore();
    const gateway = await gatewayWith(store, { release: null });
    const lease = await mint(store, 'order:8');
    const res = await request(`${gateway.url}/orders/8`, {
      method: 'PUT',
      headers: { 'fencing-token': String(lease.token), 'content-type': ';;' },
      body: 'abc',
    });
    expect(res.statusCode).toBe(200);
    expect(await res.body.text()).toBe('ok');
  });
});

describe('the data plane when a step throws', () => {
  /** A plane on a bare node:http server whose one route's kind runs `serve`. */
  async function planeServing(serve: (ex: Exchange) => void | Promise<void>): Promise<string> {
    const route = {
      name: 'r',
      fencing: null,
      idempotency: null,
      upstream: { kind: 'http', methodOverride: 'drop' },
    };
    const policy = { upstreams: {}, match: () => ({ route, params: {} }) };
    const log = pino({ level: 'silent' });
    const metrics = createMetrics({ defaultMetrics: false });
    const plane = new DataPlane({
      policy: { current: policy } as unknown as PolicyHolder,
      fence: { step: () => Promise.resolve(false), refuseNow: () => false },
      idempotency: new Idempotency(new MemoryStore(), metrics),
      runtimes: { serve } as unknown as KindRuntimes,
      access: new AccessRecorder(metrics, 0, log),
      log,
      trustProxy: false,
    });
    const server = createServer((req, res) => plane.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    started.push({ close: () => new Promise<void>((resolve) => server.close(() => resolve())) });
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  it('answers an error thrown before the answer as a problem: 500 internal, or the ProblemError it is', async () => {
    const thrown = await planeServing(() => {
      throw new Error('boom');
    });
    const res = await request(`${thrown}/x`);
    expect(res.statusCode).toBe(500);
    expect(await res.body.json()).toMatchObject({ type: 'urn:fencegate:internal' });
    const rejected = await planeServing(() => Promise.reject(new ProblemError('lock-held', 'held')));
    const problem = await request(`${rejected}/x`);
    expect(problem.statusCode).toBe(409);
    expect(await problem.body.json()).toMatchObject({ type: 'urn:fencegate:lock-held' });
  });

  it('cuts an answer that had started, or a problem it cannot write, without an unhandled error', async () => {
    const url = await planeServing((ex) => {
      ex.res.writeHead(200, { 'content-length': '10' });
      ex.res.write('12345');
      throw new Error('boom mid-answer');
    });
    await expect(request(`${url}/x`).then((r) => r.body.text())).rejects.toThrow();
    // A problem that cannot be written (an invalid header value) is a cut too, not a crash.
    const bad = await planeServing(() =>
      Promise.reject(new ProblemError('lock-held', 'held', {}, { headers: { 'retry-after': 'a\nb' } })),
    );
    await expect(request(`${bad}/x`)).rejects.toThrow();
  });
});
