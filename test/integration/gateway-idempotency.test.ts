/**
 * Idempotency keys at the gateway (docs/gateway.md, "Idempotency"), on every store: two
 * gateways, each on its own connection to one store (as two processes are), share the
 * records. A retry after a dropped response is replayed and the upstream saw the write
 * once; a duplicate in flight gets 409, another body 422; records expire after ttlMs; the
 * fence still refuses a stale token with a fresh key.
 */
import { connect } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/types.js';
import {
  mint,
  send,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
  type UpstreamHandler,
} from '../helpers/gateway-harness.js';
import { STORE_FIXTURES, type Harness } from '../helpers/stores.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { sleep, waitUntil } from '../helpers/wait.js';

function policy(upstreamUrl: string, ttlMs: number): string {
  return `version: 1
upstreams:
  orders:
    kind: http
    url: ${upstreamUrl}
    breaker: { volumeThreshold: 1000 }
routes:
  - name: order-writes
    methods: [POST, PUT]
    path: /orders/:orderId
    upstream: orders
    lock: "order:{orderId}"
    idempotency: { ttlMs: ${ttlMs} }
`;
}

/** Answers POST /orders/… 201 with the write's number, once `open` lets it (held: answers wait). */
function gatedUpstream() {
  const writes: string[] = [];
  const waiting: (() => void)[] = [];
  let held = false;
  let status = 201;
  const handler: UpstreamHandler = async (_req, res, hit) => {
    writes.push(hit.url);
    if (held) await new Promise<void>((resolve) => waiting.push(resolve));
    const text = JSON.stringify({ write: writes.length, url: hit.url });
    res.writeHead(status, { 'content-type': 'application/json', 'x-upstream': 'yes' }).end(text);
  };
  return {
    handler,
    writes,
    hold: () => void (held = true),
    open: () => {
      held = false;
      for (const w of waiting.splice(0)) w();
    },
    answerWith: (s: number) => void (status = s),
  };
}

/** Sends the request on a raw socket, and cuts the connection once `cutWhen` holds: its answer is never read. */
async function sendAndDrop(
  gw: TestGateway,
  path: string,
  headers: Record<string, string>,
  body: string,
  cutWhen: () => boolean,
) {
  const socket = connect(gw.port, '127.0.0.1');
  await new Promise<void>((resolve) => socket.once('connect', resolve));
  const head = Object.entries({
    host: '127.0.0.1',
    'content-length': String(Buffer.byteLength(body)),
    ...headers,
  })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.write(`POST ${path} HTTP/1.1\r\n${head}\r\n${body}`);
  socket.on('data', () => undefined);
  await waitUntil('the upstream to get the write', cutWhen);
  socket.destroy();
  // The gateway saw the client go before the upstream answers.
  const connections = () =>
    new Promise<number>((resolve) => gw.app.server.getConnections((_e, n) => resolve(n)));
  await waitUntil('the gateway to see the client gone', async () => (await connections()) === 0);
}

/** A POST to /orders/<id> with a fencing token and, unless null, an idempotency key. */
function post(gw: TestGateway, id: number, token: bigint, key: string | null, body: string) {
  const headers: Record<string, string> = { 'fencing-token': String(token) };
  if (key !== null) headers['idempotency-key'] = key;
  return send(gw, 'POST', `/orders/${id}`, headers, body);
}

describe.each(STORE_FIXTURES)('idempotency keys: $name', (fixture) => {
  let h: Harness;
  let other: Store;
  let up: ReturnType<typeof gatedUpstream>;
  let upstream: TestUpstream;
  let a: TestGateway;
  let b: TestGateway;

  async function start(ttlMs = 60_000) {
    up = gatedUpstream();
    upstream = await startUpstream(up.handler);
    a = await startGateway({ store: h.store, policy: policy(upstream.url, ttlMs) });
    b = await startGateway({ store: other, policy: policy(upstream.url, ttlMs) });
  }

  beforeEach(async () => {
    h = await fixture.open();
    other = await h.another();
  });
  afterEach(async () => {
    await a?.close();
    await b?.close();
    await upstream?.close();
    await h.close();
  });

  it('replays the answer of a write whose response was dropped, on either gateway; the upstream saw it once', async () => {
    await start();
    const lease = await mint(h.store, 'order:1');
    const headers = {
      'fencing-token': String(lease.token),
      'idempotency-key': '"k-dropped"',
      'content-type': 'application/json',
    };
    const body = '{"amount":5}';
    up.hold();
    // The upstream has the write; the client's connection is cut before any answer came back.
    await sendAndDrop(a, '/orders/1', headers, body, () => up.writes.length === 1);
    up.open();
    // The retry goes to the other gateway: 409 while the first is still being kept, then the replay.
    let retry = await send(b, 'POST', '/orders/1', headers, body);
    await waitUntil('the answer to be kept', async () => {
      retry = await send(b, 'POST', '/orders/1', headers, body);
      if (retry.status === 409) expect(retry.body.type).toBe('urn:fencegate:idempotency-in-flight');
      return retry.status !== 409;
    });
    expect(retry.status).toBe(201);
    expect(retry.body).toEqual({ write: 1, url: '/orders/1' });
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(retry.headers['x-upstream']).toBe('yes');
    const again = await send(a, 'POST', '/orders/1', headers, body);
    expect([again.status, again.text, again.headers['idempotent-replayed']]).toEqual([
      201,
      retry.text,
      'true',
    ]);
    expect(up.writes).toEqual(['/orders/1']);
    const metrics = await b.metrics.registry.metrics();
    expect(metrics).toMatch(/fencegate_idempotency_total\{route="order-writes",outcome="replayed"\} [1-9]/);
  });

  it('a duplicate while the first is in flight gets 409 idempotency-in-flight; another body 422 idempotency-mismatch', async () => {
    await start();
    const lease = await mint(h.store, 'order:2');
    const headers = { 'fencing-token': String(lease.token), 'idempotency-key': 'k-busy' };
    up.hold();
    const first = send(a, 'POST', '/orders/2', headers, 'one');
    await waitUntil('the upstream to get the write', () => up.writes.length === 1);
    const dup = await send(b, 'POST', '/orders/2', headers, 'one');
    expect(dup.status).toBe(409);
    expect(dup.body.type).toBe('urn:fencegate:idempotency-in-flight');
    expect(Number(dup.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    const other = await send(b, 'POST', '/orders/2', headers, 'two');
    expect(other.status).toBe(422);
    expect(other.body.type).toBe('urn:fencegate:idempotency-mismatch');
    up.open();
    expect((await first).status).toBe(201);
    // Done: another body is still a mismatch; so is another token with the same key.
    expect((await send(a, 'POST', '/orders/2', headers, 'two')).status).toBe(422);
    const newer = await mint(h.store, 'order:2');
    const moved = await send(
      a,
      'POST',
      '/orders/2',
      { ...headers, 'fencing-token': String(newer.token) },
      'one',
    );
    expect(moved.status).toBe(422);
    expect(up.writes).toHaveLength(1);
  });

  it('a stale token with a fresh key is refused by the fence; the replay of an admitted write stays its answer', async () => {
    await start();
    const old = await mint(h.store, 'order:3');
    const done = await post(a, 3, old.token, 'k-old', 'x');
    expect(done.status).toBe(201);
    const newer = await mint(h.store, 'order:3');
    expect((await post(b, 3, newer.token, null, 'y')).status).toBe(201);
    const fresh = await post(a, 3, old.token, 'k-new', 'x');
    expect(fresh.status).toBe(409);
    expect(fresh.body.type).toBe('urn:fencegate:stale-token');
    // The refused request kept nothing: its key is refused again by the fence, not replayed.
    const again = await post(b, 3, old.token, 'k-new', 'x');
    expect(again.body.type).toBe('urn:fencegate:stale-token');
    const replay = await post(b, 3, old.token, 'k-old', 'x');
    expect([replay.status, replay.text, replay.headers['idempotent-replayed']]).toEqual([
      201,
      done.text,
      'true',
    ]);
    expect(up.writes).toHaveLength(2);
  });

  it('an upstream 5xx is not kept: the retry reaches the upstream again', async () => {
    await start();
    const lease = await mint(h.store, 'order:4');
    const headers = { 'fencing-token': String(lease.token), 'idempotency-key': 'k-5xx' };
    up.answerWith(503);
    expect((await send(a, 'POST', '/orders/4', headers, 'x')).status).toBe(503);
    up.answerWith(201);
    let retry = await send(b, 'POST', '/orders/4', headers, 'x');
    await waitUntil('the record to be abandoned', async () => {
      if (retry.status === 409) retry = await send(b, 'POST', '/orders/4', headers, 'x');
      return retry.status !== 409;
    });
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBeUndefined();
    expect(up.writes).toHaveLength(2);
  });

  it('a kept answer expires after ttlMs: the same key is then a new request', async () => {
    await start(1000);
    const lease = await mint(h.store, 'order:5');
    const headers = { 'fencing-token': String(lease.token), 'idempotency-key': 'k-ttl' };
    expect((await send(a, 'POST', '/orders/5', headers, 'x')).status).toBe(201);
    // Another body under the key: 422 while the answer is kept, a new request once it expired
    // (no assertion on when: only that it does, and then reaches the upstream).
    const statuses = new Set<number>();
    await waitUntil(
      'the record to expire',
      async () => {
        const status = (await send(b, 'POST', '/orders/5', headers, 'other')).status;
        statuses.add(status);
        return status === 201;
      },
      { timeoutMs: 10_000, everyMs: 100 },
    );
    for (const status of statuses) expect([201, 422]).toContain(status);
    expect(up.writes).toHaveLength(2);
  });

  it('refuses a malformed key with 400 and passes a request without a key as before', async () => {
    await start();
    const lease = await mint(h.store, 'order:6');
    const bad = await post(a, 6, lease.token, '"unclosed', 'x');
    expect(bad.status).toBe(400);
    expect(bad.body.type).toBe('urn:fencegate:bad-request');
    expect((await post(a, 6, lease.token, null, 'x')).status).toBe(201);
    expect((await post(a, 6, lease.token, null, 'x')).status).toBe(201);
    expect(up.writes).toHaveLength(2);
  });
});

describe('idempotency keys: a refusal and the end of its record', () => {
  it('answers a refused write only once its record is abandoned, so a retry on reading it is judged afresh', async () => {
    const store = new MemoryStore();
    // A store slow to end a record (etcd under load was): the refusal must wait for it.
    const slow = new Proxy(store, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver) as unknown;
        if (name === 'abandonIdempotent')
          return async (key: string, attempt: string) => {
            await sleep(300);
            return target.abandonIdempotent(key, attempt);
          };
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const upstream = await startUpstream((_req, res) => void res.writeHead(201).end('ok'));
    const gw = await startGateway({ store: slow, policy: policy(upstream.url, 60_000) });
    try {
      const old = await mint(store, 'order:9');
      await mint(store, 'order:9');
      expect((await post(gw, 9, old.token + 1n, null, 'y')).status).toBe(201);
      const refused = await post(gw, 9, old.token, 'k-stale', 'x');
      expect(refused.body.type).toBe('urn:fencegate:stale-token');
      const again = await post(gw, 9, old.token, 'k-stale', 'x');
      expect(again.body.type).toBe('urn:fencegate:stale-token');
    } finally {
      await gw.close();
      await upstream.close();
      await store.close();
    }
  });
});
