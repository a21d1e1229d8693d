/**
 * What bounds a forwarded request, so that keeping a write's in-flight entry alive can
 * never hold a lock's drain barrier forever: a client body that stalls or takes too
 * long is cut with 408 (the upstream request aborted), an upstream that only sends 1xx
 * interim responses gets its 504, and a gateway whose session lapsed forwards nothing
 * more under it. Each case also checks that the next writer on the lock then proceeds.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { faultyStore, type FaultyStore } from '../helpers/faulty-store.js';
import {
  mint,
  send,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
  type UpstreamHandler,
} from '../helpers/gateway-harness.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { SMALL_BODY_BYTES } from '../../src/gateway/fence.js';
import { sleep } from '../helpers/wait.js';

function policy(upstreamUrl: string): string {
  return `version: 1
upstreams:
  app:
    kind: http
    url: ${upstreamUrl}
    timeoutMs: 600
    breaker: { volumeThreshold: 1000 }
routes:
  - name: idle-writes
    methods: [PUT]
    path: /idle/:id
    upstream: app
    lock: "doc:{id}"
    upload: { idleTimeoutMs: 300 }
  - name: slow-writes
    methods: [PUT]
    path: /slow/:id
    upstream: app
    lock: "doc:{id}"
    upload: { idleTimeoutMs: 2000, timeoutMs: 500 }
  - name: long-writes
    methods: [PUT]
    path: /long/:id
    upstream: app
    lock: "doc:{id}"
    upload: { idleTimeoutMs: 10000, timeoutMs: 20000 }
  - name: plain
    methods: [GET, PUT]
    path: /plain/:id
    upstream: app
`;
}

/** A raw HTTP/1.1 request whose body the test sends by hand; resolves the response text. */
function rawRequest(port: number, head: string): { socket: Socket; response: Promise<string> } {
  const socket = connect(port, '127.0.0.1');
  socket.write(head);
  const response = new Promise<string>((resolve) => {
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.on('close', () => resolve(text));
    socket.on('error', () => undefined);
  });
  return { socket, response };
}

const ok: UpstreamHandler = (_req, res) => void res.writeHead(200).end('ok');

/** A body length above the small-body read (fence.ts): such a body streams to the upstream. */
const STREAMED = SMALL_BODY_BYTES + 1;

describe('bounds on forwarded requests', () => {
  let memory: MemoryStore;
  let store: FaultyStore;
  let upstream: TestUpstream;
  let gw: TestGateway;

  beforeAll(async () => {
    memory = new MemoryStore();
    store = faultyStore(memory);
    upstream = await startUpstream(ok);
    gw = await startGateway({ store, policy: policy(upstream.url), session: { ttlMs: 900 } });
  });

  afterEach(() => {
    upstream.handler = ok;
    store.failing.clear();
  });

  afterAll(async () => {
    await gw.close();
    await upstream.close();
  });

  it('an upload idle past upload.idleTimeoutMs is cut with 408, and the next writer on the lock proceeds', async () => {
    const a = await mint(store, 'doc:1');
    const { socket, response } = rawRequest(
      gw.port,
      `PUT /idle/1 HTTP/1.1\r\nhost: x\r\nfencing-token: ${a.token}\r\ncontent-length: ${STREAMED}\r\n\r\nabc`,
    );
    // Wait until the write reached the upstream (its headers), then stall.
    for (let i = 0; i < 100 && upstream.hits.length === 0; i++) await sleep(20);
    const hit = upstream.hits.at(-1);
    expect(hit?.url).toBe('/idle/1');
    const text = await response;
    socket.destroy();
    expect(text).toMatch(/^HTTP\/1\.1 408 /);
    expect(text).toMatch(/application\/problem\+json/);
    expect(text).toContain('urn:fencegate:request-timeout');
    expect(hit?.bytes).toBe(3); // the upstream got the 3 bytes, never the end: nothing to apply
    expect(hit?.answeredAt).toBeNull();
    expect(memory.inflightCount('doc:1')).toBe(0);
    // The next owner's write is not held back by the cut one.
    const b = await mint(store, 'doc:1');
    const res = await send(gw, 'PUT', '/idle/1', { 'fencing-token': String(b.token) }, 'next');
    expect(res.status).toBe(200);
    expect(await gw.metrics.forwardsCut.get()).toMatchObject({
      values: expect.arrayContaining([
        expect.objectContaining({ labels: { reason: 'body-idle' }, value: 1 }),
      ]),
    });
  });

  it('an upload that keeps trickling past upload.timeoutMs is cut with 408', async () => {
    const a = await mint(store, 'doc:2');
    const { socket, response } = rawRequest(
      gw.port,
      `PUT /slow/2 HTTP/1.1\r\nhost: x\r\nfencing-token: ${a.token}\r\ncontent-length: ${STREAMED}\r\n\r\n`,
    );
    const trickle = setInterval(() => socket.write('x'), 100); // never idle for 2 s
    const text = await response;
    clearInterval(trickle);
    socket.destroy();
    expect(text).toMatch(/^HTTP\/1\.1 408 /);
    expect(text).toContain('took longer than 500 ms');
    expect(memory.inflightCount('doc:2')).toBe(0);
  });

  it('an upstream sending only 1xx interim responses gets a 504 after timeoutMs', async () => {
    let closed = false;
    upstream.handler = (req, res) => {
      const hints = setInterval(() => res.writeEarlyHints({ link: '</a.css>; rel=preload' }), 2);
      req.socket.on('close', () => {
        closed = true;
        clearInterval(hints);
      });
    };
    const a = await mint(store, 'doc:3');
    const res = await send(gw, 'PUT', '/idle/3', { 'fencing-token': String(a.token) }, 'x');
    expect(res.status).toBe(504);
    expect(res.body).toMatchObject({ type: 'urn:fencegate:upstream-timeout', upstream: 'app' });
    for (let i = 0; i < 50 && !closed; i++) await sleep(20);
    expect(closed).toBe(true); // the upstream request was aborted, not left trickling
    expect(memory.inflightCount('doc:3')).toBe(0);
    // Unfenced routes are bounded the same way.
    const plain = await send(gw, 'GET', '/plain/3');
    expect(plain.status).toBe(504);
  });

  it('a gateway whose session lapsed cuts a fenced write still streaming, and admits nothing until it beats again', async () => {
    const a = await mint(store, 'doc:4');
    const { socket, response } = rawRequest(
      gw.port,
      `PUT /long/4 HTTP/1.1\r\nhost: x\r\nfencing-token: ${a.token}\r\ncontent-length: ${STREAMED}\r\n\r\nabc`,
    );
    for (let i = 0; i < 100 && upstream.hits.at(-1)?.url !== '/long/4'; i++) await sleep(20);
    const hit = upstream.hits.at(-1);
    store.failing.add('beatSession'); // the store stops acknowledging this gateway's beats
    const text = await response;
    socket.destroy();
    expect(text).toMatch(/^HTTP\/1\.1 503 /);
    expect(text).toContain('lost its session with the fence store');
    expect(hit?.bytes).toBe(3);
    expect(hit?.answeredAt).toBeNull();
    const refused = await send(gw, 'PUT', '/idle/4', { 'fencing-token': String(a.token) }, 'x');
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({ type: 'urn:fencegate:fence-unavailable' });
    expect((await send(gw, 'PUT', '/plain/4', {}, 'x')).status).toBe(200); // unfenced routes flow
    store.failing.clear();
    let after = refused;
    for (let i = 0; i < 50 && after.status !== 200; i++) {
      await sleep(50);
      after = await send(gw, 'PUT', '/idle/4', { 'fencing-token': String(a.token) }, 'x');
    }
    expect(after.status).toBe(200);
  });

  describe('a small fenced body still on its way is read whole before forwarding', () => {
    it('the upstream gets the request in one piece, after its last byte', async () => {
      const a = await mint(store, 'doc:5');
      const { socket, response } = rawRequest(
        gw.port,
        `PUT /long/5 HTTP/1.1\r\nhost: x\r\nfencing-token: ${a.token}\r\ncontent-length: 10\r\nconnection: close\r\n\r\nabc`,
      );
      await sleep(150);
      expect(upstream.hits.some((h) => h.url === '/long/5')).toBe(false); // not yet: still reading
      const restSentAt = Date.now();
      socket.write('defghij');
      const text = await response;
      expect(text).toMatch(/^HTTP\/1\.1 200 /);
      const hit = upstream.hits.find((h) => h.url === '/long/5');
      expect(hit?.bytes).toBe(10);
      expect(hit!.receivedAt).toBeGreaterThanOrEqual(restSentAt);
      expect(memory.inflightCount('doc:5')).toBeLessThanOrEqual(1); // at most an admission hold's entry
    });

    it('one that stalls past upload.idleTimeoutMs is 408 and never reaches the upstream', async () => {
      const a = await mint(store, 'doc:6');
      const { socket, response } = rawRequest(
        gw.port,
        `PUT /idle/6 HTTP/1.1\r\nhost: x\r\nfencing-token: ${a.token}\r\ncontent-length: 10\r\n\r\nabc`,
      );
      const text = await response;
      socket.destroy();
      expect(text).toMatch(/^HTTP\/1\.1 408 /);
      expect(text).toContain('urn:fencegate:request-timeout');
      expect(upstream.hits.some((h) => h.url === '/idle/6')).toBe(false);
      await store.entriesFinished();
    });

    it('one that trickles in for longer than upload.idleTimeoutMs, never idle that long, is forwarded whole', async () => {
      const a = await mint(store, 'doc:8');
      const { socket, response } = rawRequest(
        gw.port,
        `PUT /idle/8 HTTP/1.1\r\nhost: x\r\nfencing-token: ${a.token}\r\ncontent-length: 8\r\nconnection: close\r\n\r\n`,
      );
      const started = Date.now();
      let sent = 0;
      const trickle = setInterval(() => {
        if (sent < 8) socket.write(String(sent++)); // a byte every 100 ms, 800 ms in all; idle limit 300
      }, 100);
      const text = await response;
      clearInterval(trickle);
      expect(text).toMatch(/^HTTP\/1\.1 200 /);
      expect(Date.now() - started).toBeGreaterThanOrEqual(700);
      expect(upstream.hits.find((h) => h.url === '/idle/8')?.bytes).toBe(8);
    });

    it('one that keeps trickling past upload.timeoutMs is 408 and never reaches the upstream', async () => {
      const a = await mint(store, 'doc:9');
      const { socket, response } = rawRequest(
        gw.port,
        `PUT /slow/9 HTTP/1.1\r\nhost: x\r\nfencing-token: ${a.token}\r\ncontent-length: 100\r\n\r\n`,
      );
      const trickle = setInterval(() => socket.write('x'), 50); // never idle for 2 s; 5 s in all
      const text = await response;
      clearInterval(trickle);
      socket.destroy();
      expect(text).toMatch(/^HTTP\/1\.1 408 /);
      expect(text).toContain('took longer than 500 ms');
      expect(upstream.hits.some((h) => h.url === '/slow/9')).toBe(false);
      await store.entriesFinished();
    });

    it('when the session lapses meanwhile: 503 at once, never forwarded', async () => {
      const a = await mint(store, 'doc:7');
      const { socket, response } = rawRequest(
        gw.port,
        `PUT /long/7 HTTP/1.1\r\nhost: x\r\nfencing-token: ${a.token}\r\ncontent-length: 10\r\n\r\nabc`,
      );
      await sleep(100);
      store.failing.add('beatSession');
      const text = await response; // long before the route's 10 s idle timeout
      socket.destroy();
      expect(text).toMatch(/^HTTP\/1\.1 503 /);
      expect(text).toContain('lost its session with the fence store');
      expect(upstream.hits.some((h) => h.url === '/long/7')).toBe(false);
      store.failing.clear();
      let after = await send(gw, 'PUT', '/idle/7', { 'fencing-token': String(a.token) }, 'x');
      for (let i = 0; i < 50 && after.status !== 200; i++) {
        await sleep(50);
        after = await send(gw, 'PUT', '/idle/7', { 'fencing-token': String(a.token) }, 'x');
      }
      expect(after.status).toBe(200);
    });
  });
});
