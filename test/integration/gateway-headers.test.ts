import { request } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
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
import { raw, statusOf } from '../helpers/raw-http.js';

describe('gateway header hygiene', () => {
  let store: Store;
  let upstream: TestUpstream;
  let gw: TestGateway;
  let token: string;

  beforeEach(async () => {
    store = new MemoryStore();
    upstream = await startUpstream();
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url) });
    token = String((await mint(store, 'order:1')).token);
  });

  afterEach(async () => {
    await gw.close();
    await upstream.close();
  });

  it('Connection: fencing-token cannot strip the token the gateway forwards', async () => {
    const response = await raw(
      gw.port,
      `PUT /orders/1 HTTP/1.1\r\nHost: x\r\nFencing-Token: ${token}\r\nConnection: fencing-token, x-drop-me\r\n` +
        'Connection: close\r\nX-Drop-Me: 1\r\nX-Keep: 1\r\nContent-Length: 1\r\n\r\nx',
    );
    expect(statusOf(response)).toBe(200);
    const h = upstream.hits[0]!.headers;
    expect(h['fencing-token']).toBe(token);
    expect(h['x-drop-me']).toBeUndefined();
    expect(h['x-keep']).toBe('1');
    expect(h.connection).not.toContain('fencing-token');
  });

  it('strips hop-by-hop headers from the request', async () => {
    const response = await raw(
      gw.port,
      'PUT /orders/1 HTTP/1.1\r\nHost: shop.example\r\nFencing-Token: ' +
        token +
        '\r\nKeep-Alive: timeout=99\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\n' +
        'TE: trailers\r\nTrailer: x-t\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx',
    );
    expect(statusOf(response)).toBe(200);
    const h = upstream.hits[0]!.headers;
    for (const name of ['keep-alive', 'proxy-connection', 'proxy-authorization', 'te', 'trailer']) {
      expect(h[name], name).toBeUndefined();
    }
    expect(h['x-forwarded-host']).toBe('shop.example');
  });

  it('several Fencing-Token headers → 400 token-malformed, even when equal', async () => {
    for (const second of [token, '999']) {
      const response = await raw(
        gw.port,
        `PUT /orders/1 HTTP/1.1\r\nHost: x\r\nFencing-Token: ${token}\r\nfencing-token: ${second}\r\n` +
          'Content-Length: 0\r\nConnection: close\r\n\r\n',
      );
      expect(statusOf(response)).toBe(400);
      expect(response).toContain('urn:fencegate:token-malformed');
    }
    expect(upstream.hits).toHaveLength(0);
  });

  it('client copies of gateway-added headers are replaced, not passed on', async () => {
    const res = await request(`${gw.url}/shadow/1`, {
      method: 'PUT',
      headers: {
        'x-fencegate-fence': 'admitted',
        'x-fencegate-route': 'evil',
        'x-fencegate-request-id': 'spoofed',
        'x-fencegate-anything': 'x',
        forwarded: 'for=6.6.6.6',
        'x-forwarded-for': '6.6.6.6',
        'x-forwarded-host': 'evil.example',
        'x-forwarded-proto': 'https',
      },
      body: 'x',
    });
    await res.body.text();
    const h = upstream.hits[0]!.headers;
    expect(h['x-fencegate-fence']).toBe('shadow-refused');
    expect(h['x-fencegate-route']).toBe('shadow-writes');
    expect(h['x-fencegate-request-id']).not.toBe('spoofed');
    expect(h['x-fencegate-anything']).toBeUndefined();
    expect(h['x-forwarded-for']).toBe('127.0.0.1');
    expect(h.forwarded).toMatch(/^for="127\.0\.0\.1";proto=http;host="127\.0\.0\.1:\d+"$/);
    expect(h['x-forwarded-host']).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(h['x-forwarded-proto']).toBe('http');
  });

  it("x-fencegate-lock is the gateway's: set (URL-encoded) on fenced writes, never passed from the client", async () => {
    const fenced = await request(`${gw.url}/orders/1`, {
      method: 'PUT',
      headers: { 'fencing-token': token, 'x-fencegate-lock': 'order%3A999' },
      body: 'x',
    });
    await fenced.body.text();
    expect(fenced.statusCode).toBe(200);
    expect(upstream.hits[0]?.headers['x-fencegate-lock']).toBe('order%3A1');
    expect(upstream.hits[0]?.rawHeaders.filter((h) => h.toLowerCase() === 'x-fencegate-lock')).toHaveLength(
      1,
    );
    const read = await request(`${gw.url}/orders/1`, { headers: { 'x-fencegate-lock': 'order%3A999' } });
    await read.body.text();
    expect(upstream.hits[1]?.headers['x-fencegate-lock']).toBeUndefined();
  });

  it('the client cannot inject a Fencing-Token on a fenced route in shadow mode without a valid one', async () => {
    const res = await request(`${gw.url}/shadow/1`, {
      method: 'PUT',
      headers: { 'fencing-token': '007' },
      body: 'x',
    });
    await res.body.text();
    expect(upstream.hits[0]?.headers['fencing-token']).toBeUndefined();
  });

  it('both Content-Length and Transfer-Encoding → 400, never forwarded', async () => {
    const response = await raw(
      gw.port,
      `PUT /orders/1 HTTP/1.1\r\nHost: x\r\nFencing-Token: ${token}\r\nContent-Length: 5\r\n` +
        'Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nPUT /orders/1 HTTP/1.1\r\nHost: x\r\n\r\n',
    );
    expect(statusOf(response)).toBe(400);
    expect(upstream.hits).toHaveLength(0);
  });

  it('obfuscated Transfer-Encoding and duplicate Content-Length are refused', async () => {
    for (const head of [
      'Transfer-Encoding: xchunked\r\nContent-Length: 3',
      'Content-Length: 3\r\nContent-Length: 4',
      'Transfer-Encoding: chunked\r\nTransfer-Encoding: identity',
    ]) {
      const response = await raw(
        gw.port,
        `PUT /orders/1 HTTP/1.1\r\nHost: x\r\nFencing-Token: ${token}\r\n${head}\r\n\r\nabc`,
      );
      expect(statusOf(response), head).toBe(400);
    }
    expect(upstream.hits).toHaveLength(0);
  });

  it('ambiguous paths are refused, path variants still hit the fenced route', async () => {
    // Raw: a WHATWG URL client would resolve %2e%2e itself.
    for (const path of ['/orders/%2e%2e/admin', '/orders/../admin', '/orders/a%2Fb', '/orders/%zz']) {
      const response = await raw(
        gw.port,
        `PUT ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
      );
      expect(statusOf(response), path).toBe(400);
    }
    for (const path of ['/orders//1', '/orders/1/', '/%6frders/1']) {
      const res = await request(`${gw.url}${path}`, { method: 'PUT', body: 'x' });
      await res.body.text();
      expect(res.statusCode, path).toBe(428);
    }
    expect(upstream.hits).toHaveLength(0);
  });

  it('strips hop-by-hop headers and Connection-named headers from the response', async () => {
    upstream.handler = (_req, res) => {
      res.setHeader('connection', 'x-secret');
      res.setHeader('x-secret', 'internal');
      res.setHeader('keep-alive', 'timeout=1');
      res.setHeader('x-public', 'yes');
      res.end('ok');
    };
    const res = await request(`${gw.url}/orders/1`);
    await res.body.text();
    expect(res.headers['x-public']).toBe('yes');
    expect(res.headers['x-secret']).toBeUndefined();
    expect(res.headers['keep-alive']).not.toBe('timeout=1');
  });
});

describe('gateway behind a trusted proxy', () => {
  it('keeps and extends the incoming X-Forwarded-For and Forwarded chains', async () => {
    const upstream = await startUpstream();
    const gw = await startGateway({
      store: new MemoryStore(),
      policy: ordersPolicy(upstream.url),
      trustProxy: true,
    });
    try {
      const res = await request(`${gw.url}/orders/1`, {
        headers: {
          'x-forwarded-for': '203.0.113.9',
          forwarded: 'for="203.0.113.9"',
          'x-forwarded-proto': 'https',
        },
      });
      await res.body.text();
      const h = upstream.hits[0]!.headers;
      expect(h['x-forwarded-for']).toBe('203.0.113.9, 127.0.0.1');
      expect(h.forwarded).toMatch(/^for="203\.0\.113\.9", for="127\.0\.0\.1";proto=https;/);
      expect(h['x-forwarded-proto']).toBe('https');
    } finally {
      await gw.close();
      await upstream.close();
    }
  });
});
