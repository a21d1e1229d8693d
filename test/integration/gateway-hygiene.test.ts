/**
 * Request hygiene on the data listener: what a careless or hostile client sends that the
 * upstream's framework would read as a different method, path or gateway header never
 * reaches it; what the upstream sends as the gateway's own headers never reaches the
 * client; Node's parser refusals are problems like every other refusal.
 */
import { createServer as createNetServer, type AddressInfo, type Server } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/types.js';
import {
  mint,
  ordersPolicy,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from '../helpers/gateway-harness.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { raw } from '../helpers/raw-http.js';

function parse(response: string): { status: number; headers: string; body: unknown } {
  const end = response.indexOf('\r\n\r\n');
  const body = response.slice(end + 4);
  return {
    status: Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0),
    headers: response.slice(0, end).toLowerCase(),
    body: parseJson(body),
  };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

describe('request hygiene on the data listener', () => {
  let store: Store;
  let upstream: TestUpstream;
  let gw: TestGateway;
  let token: string;

  beforeAll(async () => {
    store = new MemoryStore();
    upstream = await startUpstream((req, res) => {
      // An upstream (or something between) that speaks as the gateway.
      res.writeHead(200, {
        'content-type': 'application/json',
        'x-fencegate-route': 'forged',
        'x-fencegate-fence': 'admitted',
      });
      res.end('{}');
    });
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url) });
    token = String((await mint(store, 'order:1')).token);
  });
  afterAll(async () => {
    await gw.close();
    await upstream.close();
  });

  it('method- and path-override headers never reach the upstream', async () => {
    upstream.hits.length = 0;
    const res = await request(`${gw.url}/orders/1`, {
      method: 'GET',
      headers: {
        'x-http-method-override': 'PUT',
        'x-http-method': 'DELETE',
        'x-method-override': 'PATCH',
        'x-original-url': '/orders/2',
        'x-rewrite-url': '/orders/3',
        'x-keep': 'yes',
      },
    });
    await res.body.text();
    expect(res.statusCode).toBe(200);
    const h = upstream.hits[0]!.headers;
    for (const name of [
      'x-http-method-override',
      'x-http-method',
      'x-method-override',
      'x-original-url',
      'x-rewrite-url',
    ]) {
      expect(h[name], name).toBeUndefined();
    }
    expect(h['x-keep']).toBe('yes');
  });

  it('header names with "_" are dropped, so `fencing_token` cannot pose as the real header', async () => {
    upstream.hits.length = 0;
    const response = parse(
      await raw(
        gw.port,
        `PUT /orders/1 HTTP/1.1\r\nHost: x\r\nFencing-Token: ${token}\r\nfencing_token: 999999999999\r\n` +
          'x_fencegate_lock: order:2\r\nX_Custom: 1\r\nX-Custom: 2\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx',
      ),
    );
    expect(response.status).toBe(200);
    const h = upstream.hits[0]!.headers;
    expect(Object.keys(h).filter((n) => n.includes('_'))).toEqual([]);
    expect(h['fencing-token']).toBe(token);
    expect(h['x-custom']).toBe('2');
  });

  it('a `_method` query parameter is refused before routing, plain or percent-encoded', async () => {
    upstream.hits.length = 0;
    for (const query of ['?_method=PUT', '?a=1&_method=delete', '?%5Fmethod=PUT', '?_method[]=PUT']) {
      const res = await request(`${gw.url}/orders/1${query}`);
      expect(res.statusCode, query).toBe(400);
      expect(res.headers['content-type']).toContain('application/problem+json');
      const body = (await res.body.json()) as { type: string; detail: string };
      expect(body.type).toBe('urn:fencegate:bad-request');
      expect(body.detail).toContain('_method');
    }
    expect(upstream.hits).toHaveLength(0);
    // A parameter that merely ends in "_method" is someone's data.
    const ok = await request(`${gw.url}/orders/1?shipping_method=air`);
    await ok.body.text();
    expect(ok.statusCode).toBe(200);
  });

  it('a path the forwarding library would refuse is refused before admission: the fence stays', async () => {
    upstream.hits.length = 0;
    for (const id of ['..x', '%2e%2ex', 'x..%2Fy', 'x../']) {
      const lock = `order:${decodeURIComponent(id).replace(/\/$/, '')}`;
      const own = await mint(store, lock);
      const res = await request(`${gw.url}/orders/${id}`, {
        method: 'PUT',
        headers: { 'fencing-token': String(own.token) },
        body: '{}',
      });
      const body = (await res.body.json()) as { type: string };
      expect(res.statusCode, id).toBe(400);
      expect(body.type).toBe('urn:fencegate:bad-request');
      expect((await store.inspect(lock))?.highest ?? null, id).toBeNull();
    }
    expect(upstream.hits).toHaveLength(0);
  });

  it('x-fencegate-* headers from the upstream never reach the client', async () => {
    const res = await request(`${gw.url}/orders/1`, {
      method: 'PUT',
      headers: { 'fencing-token': token },
      body: '{}',
    });
    await res.body.text();
    expect(res.statusCode).toBe(200);
    expect(Object.keys(res.headers).filter((n) => n.startsWith('x-fencegate-'))).toEqual([]);
  });

  it("Node's parser refusals are problem+json, and the connection closes", async () => {
    const cases: [string, number, string][] = [
      ['GET /orders/1 HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n', 400, 'bad-request'],
      ['GARBAGE\r\n\r\n', 400, 'bad-request'],
      [
        'PUT /orders/1 HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx',
        417,
        'expectation-failed',
      ],
      // Node's own Host check would answer a bare 400 with no body.
      ['DELETE /orders/1 HTTP/1.1\r\nFencing-Token: 1\r\n\r\n', 400, 'bad-request'],
      [`GET /orders/1 HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'headers-too-large'],
    ];
    for (const [bytes, status, code] of cases) {
      const response = parse(await raw(gw.port, bytes));
      expect(response.status, bytes.slice(0, 20)).toBe(status);
      expect(response.headers).toContain('content-type: application/problem+json');
      expect(response.headers).toContain('connection: close');
      expect(response.body).toMatchObject({ type: `urn:fencegate:${code}`, status });
    }
  });
});

describe('route params keep id aliases off a fenced route', () => {
  let store: Store;
  let upstream: TestUpstream;
  let gw: TestGateway;

  beforeAll(async () => {
    store = new MemoryStore();
    upstream = await startUpstream();
    gw = await startGateway({
      store,
      policy: `version: 1
upstreams:
  orders:
    kind: http
    url: ${upstream.url}
routes:
  - name: order-writes
    methods: [PUT]
    path: /orders/:id
    upstream: orders
    lock: 'order:{id}'
    params: { id: '[1-9][0-9]{0,11}' }
`,
    });
  });
  afterAll(async () => {
    await gw.close();
    await upstream.close();
  });

  it('a self-issued token for an alias lock admits nothing: the alias matches no route (404)', async () => {
    // The attack: take the lock of an alias (nobody else holds it), then write through it.
    const real = await mint(store, 'order:7058');
    for (const [alias, lock] of [
      ['07058', 'order:07058'],
      ['7058.json', 'order:7058.json'],
      ['7058;v=1', 'order:7058;v=1'],
      ['%EF%BC%97%EF%BC%90%EF%BC%95%EF%BC%98', 'order:７０５８'],
    ] as const) {
      const own = await mint(store, lock);
      const res = await request(`${gw.url}/orders/${alias}`, {
        method: 'PUT',
        headers: { 'fencing-token': String(own.token) },
        body: '{}',
      });
      const body = (await res.body.json()) as { type: string };
      expect(res.statusCode, alias).toBe(404);
      expect(body.type).toBe('urn:fencegate:no-route');
    }
    expect(upstream.hits).toHaveLength(0);
    expect((await store.inspect('order:7058'))?.highest ?? null).toBeNull();
    const ok = await request(`${gw.url}/orders/7058`, {
      method: 'PUT',
      headers: { 'fencing-token': String(real.token) },
      body: '{}',
    });
    await ok.body.text();
    expect(ok.statusCode).toBe(200);
  });
});

describe('an answer the gateway cannot pass on unchanged', () => {
  let store: Store;
  let upstream: Server;
  let url = '';
  let gw: TestGateway;
  const answers: Record<string, string> = {
    gzip: 'Transfer-Encoding: gzip\r\nConnection: close\r\n\r\nnot-really-gzip',
    'chunked-then-gzip': 'Transfer-Encoding: chunked, gzip\r\nConnection: close\r\n\r\nraw',
    chunked: 'Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n',
  };

  beforeAll(async () => {
    store = new MemoryStore();
    // A raw upstream: Node's own server would not send these framings.
    upstream = createNetServer((socket) => {
      socket.once('data', (d) => {
        const kind = /^GET \/orders\/([a-z-]+)/.exec(d.toString('latin1'))?.[1] ?? 'chunked';
        socket.end(`HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n${answers[kind] ?? answers.chunked}`);
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    gw = await startGateway({ store, policy: ordersPolicy(url) });
  });
  afterAll(async () => {
    await gw.close();
    await new Promise((resolve) => upstream.close(resolve));
  });

  it('a transfer-coding besides chunked is 502 upstream-unavailable, not a silently different body', async () => {
    for (const kind of ['gzip', 'chunked-then-gzip']) {
      const res = await request(`${gw.url}/orders/${kind}`);
      const body = (await res.body.json()) as { type: string; detail: string };
      expect(res.statusCode, kind).toBe(502);
      expect(body.type).toBe('urn:fencegate:upstream-unavailable');
      expect(body.detail).toContain('transfer-coding');
    }
    const plain = await request(`${gw.url}/orders/chunked`);
    expect(plain.statusCode).toBe(200);
    expect(await plain.body.text()).toBe('ok');
  });
});

describe('an upstream that honours method-override headers (methodOverride: honour)', () => {
  let store: Store;
  let upstream: TestUpstream;
  let gw: TestGateway;

  const policy = (url: string) => `version: 1
upstreams:
  legacy:
    kind: http
    url: ${url}
    methodOverride: honour
  plain:
    kind: http
    url: ${url}
routes:
  - name: legacy-writes
    methods: [PUT, DELETE]
    path: /legacy/:id
    upstream: legacy
    lock: "legacy:{id}"
  - name: legacy-reads
    methods: [GET, POST]
    path: /legacy/*
    upstream: legacy
  - name: plain-reads
    methods: [GET, POST]
    path: /plain/*
    upstream: plain
`;

  beforeAll(async () => {
    store = new MemoryStore();
    upstream = await startUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('ok');
    });
    gw = await startGateway({ store, policy: policy(upstream.url) });
  });
  afterAll(async () => {
    await gw.close();
    await upstream.close();
  });

  const send = async (path: string, method: string, headers: Record<string, string>) => {
    const res = await request(`${gw.url}${path}`, { method, headers, body: method === 'GET' ? null : 'x' });
    const text = await res.body.text();
    return { status: res.statusCode, body: parseJson(text) };
  };

  it('a POST that says PUT is fenced as the PUT the upstream will apply', async () => {
    upstream.hits.length = 0;
    const unfenced = await send('/legacy/1', 'POST', { 'x-http-method-override': 'PUT' });
    expect(unfenced.status).toBe(428);
    expect(unfenced.body).toMatchObject({ type: 'urn:fencegate:token-required' });
    expect(upstream.hits).toHaveLength(0);

    const older = String((await mint(store, 'legacy:1')).token);
    const newer = String((await mint(store, 'legacy:1')).token);
    const admitted = await send('/legacy/1', 'POST', {
      'x-http-method-override': 'put',
      'fencing-token': newer,
    });
    expect(admitted.status).toBe(200);
    const hit = upstream.hits.at(-1)!;
    expect(hit.method).toBe('POST');
    // The upstream sees the override it will apply, and the token that fenced it.
    expect(hit.headers['x-http-method-override']).toBe('put');
    expect(hit.headers['fencing-token']).toBe(newer);

    // Even a GET that says DELETE: the stale owner is refused before the upstream.
    const hits = upstream.hits.length;
    const stale = await send('/legacy/1', 'GET', { 'x-method-override': 'DELETE', 'fencing-token': older });
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({ type: 'urn:fencegate:stale-token' });
    expect(upstream.hits).toHaveLength(hits);
  });

  it('an override no honouring route takes is dropped, and the real method routes', async () => {
    upstream.hits.length = 0;
    const res = await send('/plain/1', 'POST', { 'x-http-method-override': 'PUT' });
    expect(res.status).toBe(200);
    expect(upstream.hits[0]!.method).toBe('POST');
    expect(upstream.hits[0]!.headers['x-http-method-override']).toBeUndefined();
  });

  it('an override that names no method, or two different ones, is refused before routing', async () => {
    upstream.hits.length = 0;
    const bogus = await send('/legacy/1', 'POST', { 'x-http-method-override': 'PUT, DELETE' });
    expect(bogus.status).toBe(400);
    expect(bogus.body).toMatchObject({ type: 'urn:fencegate:bad-request' });
    const two = await send('/legacy/1', 'POST', {
      'x-http-method-override': 'PUT',
      'x-http-method': 'DELETE',
    });
    expect(two.status).toBe(400);
    expect(upstream.hits).toHaveLength(0);
  });
});
