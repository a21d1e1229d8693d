import { connect } from 'node:net';
import { Readable } from 'node:stream';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  mint,
  ordersPolicy,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from '../helpers/gateway-harness.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { sleep } from '../helpers/wait.js';

const MB = 1024 * 1024;

/** `total` bytes in 64 KiB chunks, generated as they are read. */
function body(total: number): Readable {
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= total) return void this.push(null);
      const n = Math.min(chunk.length, total - sent);
      sent += n;
      this.push(n === chunk.length ? chunk : chunk.subarray(0, n));
    },
  });
}

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Memory still reachable after a full GC: what a buffered body would show up in. */
function retained(): number {
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

describe('gateway streams bodies', () => {
  let store: MemoryStore;
  let upstream: TestUpstream;
  let gw: TestGateway;
  let token: string;

  beforeAll(async () => {
    store = new MemoryStore();
    upstream = await startUpstream();
    gw = await startGateway({ store, policy: ordersPolicy(upstream.url, { timeoutMs: 60_000 }) });
    token = String((await mint(store, 'order:big')).token);
  });

  afterAll(async () => {
    await gw.close();
    await upstream.close();
  });

  async function upload(total: number, withLength: boolean) {
    const baseline = retained();
    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, retained())), 50);
    const headers: Record<string, string> = {
      'fencing-token': token,
      'content-type': 'application/octet-stream',
    };
    if (withLength) headers['content-length'] = String(total);
    try {
      const res = await request(`${gw.url}/orders/big`, { method: 'PUT', headers, body: body(total) });
      const answer = (await res.body.json()) as { bytes: number };
      return { status: res.statusCode, answer, growth: peak - baseline };
    } finally {
      clearInterval(sampler);
    }
  }

  it('a 200 MB upload with Content-Length reaches the upstream whole, with flat memory', async () => {
    const before = upstream.hits.length;
    const { status, answer, growth } = await upload(200 * MB, true);
    expect(status).toBe(200);
    expect(answer.bytes).toBe(200 * MB);
    const hit = upstream.hits[before]!;
    expect(hit.bytes).toBe(200 * MB);
    expect(hit.headers['content-length']).toBe(String(200 * MB));
    expect(hit.headers['fencing-token']).toBe(token);
    // Buffering the body would retain ≥ 200 MB; streaming retains a few socket buffers.
    expect(growth).toBeLessThan(64 * MB);
  }, 120_000);

  it('a 200 MB answer reaches a slow reader whole, with flat memory: the upstream waits for the client', async () => {
    const total = 200 * MB;
    const echoing = upstream.handler;
    upstream.handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(total) });
      body(total).pipe(res);
    };
    const baseline = retained();
    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, retained())), 50);
    try {
      const res = await request(`${gw.url}/orders/download`);
      expect(res.statusCode).toBe(200);
      expect(res.headers['content-length']).toBe(String(total));
      let received = 0;
      let chunks = 0;
      for await (const chunk of res.body) {
        received += (chunk as Buffer).length;
        // Slower than the upstream: without flow control the gateway would hold the difference.
        if (++chunks % 4 === 0) await sleep(2);
      }
      expect(received).toBe(total);
      // Holding the answer would retain up to 200 MB; flow control keeps a few socket buffers.
      expect(peak - baseline).toBeLessThan(64 * MB);
    } finally {
      clearInterval(sampler);
      upstream.handler = echoing;
    }
  }, 120_000);

  it('a client that leaves during a long answer stops the upstream request: nothing is left reading it', async () => {
    const echoing = upstream.handler;
    let upstreamClosed: () => void = () => undefined;
    const closed = new Promise<'closed'>((resolve) => (upstreamClosed = () => resolve('closed')));
    let finished = false;
    upstream.handler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.on('close', () => {
        finished = res.writableFinished;
        upstreamClosed();
      });
      body(1024 * MB).pipe(res);
    };
    try {
      const res = await request(`${gw.url}/orders/leaving`);
      let received = 0;
      for await (const chunk of res.body) {
        received += (chunk as Buffer).length;
        if (received >= MB) break; // leaves: undici destroys the connection
      }
      const outcome = await Promise.race([
        closed,
        new Promise<'open'>((r) => setTimeout(() => r('open'), 10_000)),
      ]);
      expect(outcome).toBe('closed');
      expect(finished).toBe(false);
    } finally {
      upstream.handler = echoing;
    }
  }, 60_000);

  it('a chunked upload (no Content-Length) streams through too', async () => {
    const before = upstream.hits.length;
    const { status, answer, growth } = await upload(160 * MB, false);
    expect(status).toBe(200);
    expect(answer.bytes).toBe(160 * MB);
    expect(upstream.hits[before]?.headers['transfer-encoding']).toBe('chunked');
    expect(growth).toBeLessThan(64 * MB);
  }, 120_000);

  it.each([
    'text/plain',
    'text/plain; charset=utf-8',
    'application/json',
    'application/x-www-form-urlencoded',
    null,
  ])('bodies of any content type stream, none is parsed or capped (%s)', async (type) => {
    const headers: Record<string, string> = { 'fencing-token': token };
    if (type !== null) headers['content-type'] = type;
    const res = await request(`${gw.url}/orders/big`, { method: 'PUT', headers, body: body(3 * MB) });
    expect(res.statusCode).toBe(200);
    expect(((await res.body.json()) as { bytes: number }).bytes).toBe(3 * MB);
  });

  it('a slow upload is not an upstream timeout: timeoutMs starts once the request is sent', async () => {
    await gw.setPolicy(ordersPolicy(upstream.url, { timeoutMs: 300 }));
    try {
      async function* trickle() {
        for (let i = 0; i < 8; i++) {
          await sleep(100);
          yield Buffer.from('abc');
        }
      }
      const res = await request(`${gw.url}/orders/big`, {
        method: 'PUT',
        headers: { 'fencing-token': token },
        body: Readable.from(trickle()),
      });
      expect(res.statusCode).toBe(200);
      expect(((await res.body.json()) as { bytes: number }).bytes).toBe(24);
    } finally {
      await gw.setPolicy(ordersPolicy(upstream.url, { timeoutMs: 60_000 }));
    }
  });

  it('the fence decides on headers alone: a refused upload is answered before its body is sent', async () => {
    const stale = await mint(store, 'order:other');
    const fresh = await mint(store, 'order:other');
    const ok = await request(`${gw.url}/orders/other`, {
      method: 'PUT',
      headers: { 'fencing-token': String(fresh.token) },
      body: 'x',
    });
    await ok.body.text();
    const before = upstream.hits.length;
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(gw.port, '127.0.0.1');
      socket.on('error', reject);
      socket.once('data', (d) => {
        resolve(d.toString('latin1'));
        socket.destroy();
      });
      // Declares 50 MB, sends 1 MB, then waits: the answer must come without the rest.
      socket.write(
        `PUT /orders/other HTTP/1.1\r\nHost: x\r\nFencing-Token: ${stale.token}\r\nContent-Type: text/plain\r\nContent-Length: ${50 * MB}\r\n\r\n`,
      );
      socket.write(Buffer.alloc(MB, 0x61));
    });
    expect(answer).toMatch(/^HTTP\/1\.1 409 /);
    expect(answer).toContain('urn:fencegate:stale-token');
    expect(upstream.hits.length).toBe(before);
  });
});
