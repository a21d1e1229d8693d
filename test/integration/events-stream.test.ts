/**
 * The SSE stream's edges over real sockets: resuming from an id that fell out of the
 * ring (or came from an earlier process), and a consumer that stops reading, which is
 * dropped while a consumer that keeps up gets every event.
 */
import net from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { EventLog, type EventInput, type FenceEvent } from '../../src/observe/events.js';
import eventsRoutes from '../../src/control/events-routes.js';
import { staleEvent } from '../helpers/events.js';
import { openSse } from '../helpers/sse.js';
import { sleep } from '../helpers/wait.js';

const input = (i: number, pathBytes = 16): EventInput => staleEvent(i, `order:${i % 3}`, pathBytes);

describe('events stream', () => {
  let app: FastifyInstance | null = null;
  afterEach(async () => {
    await app?.close();
    app = null;
  });

  async function serve(events: EventLog, opts: { maxBufferBytes?: number; heartbeatMs?: number } = {}) {
    app = Fastify();
    await app.register(eventsRoutes, { events, ...opts });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const a = app.server.address() as net.AddressInfo;
    return { url: `http://127.0.0.1:${a.port}`, port: a.port };
  }

  it('reports a gap when Last-Event-ID fell out of the ring, then replays what it holds', async () => {
    const events = new EventLog({ capacity: 5 });
    for (let i = 1; i <= 12; i++) events.record(input(i));
    const { url } = await serve(events);
    const sse = await openSse(`${url}/v1/events/stream`, { 'last-event-id': '3' });
    await sse.waitFor((f) => f.length >= 6, 'the gap and five events');
    expect(sse.frames[0]).toMatchObject({ event: 'gap' });
    expect(JSON.parse(sse.frames[0]!.data)).toEqual({ after: 3, oldest: 8, latest: 12, restarted: false });
    expect(sse.events<FenceEvent>().map((e) => e.id)).toEqual([8, 9, 10, 11, 12]);
    sse.close();

    // An id this process never gave (it restarted): everything retained is new.
    const later = await openSse(`${url}/v1/events/stream?lock=order:1`, { 'last-event-id': '500' });
    await later.waitFor((f) => f.length >= 2, 'a restart gap and the matching event');
    expect(JSON.parse(later.frames[0]!.data)).toMatchObject({ after: 500, restarted: true });
    expect(later.events<FenceEvent>().map((e) => e.id)).toEqual([10]);
    later.close();
  });

  it('has no HEAD route (a HEAD would be a stream that never ends)', async () => {
    const { url } = await serve(new EventLog());
    const res = await fetch(`${url}/v1/events/stream`, { method: 'HEAD' });
    expect(res.status).toBe(404);
  });

  it('sends heartbeats as comments while nothing happens', async () => {
    const events = new EventLog();
    const { port } = await serve(events, { heartbeatMs: 50 });
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString('utf8')));
    socket.write('GET /v1/events/stream HTTP/1.1\r\nHost: x\r\n\r\n');
    const end = Date.now() + 3000;
    while ((text.match(/: heartbeat/g) ?? []).length < 2 && Date.now() < end) await sleep(20);
    expect((text.match(/: heartbeat/g) ?? []).length).toBeGreaterThanOrEqual(2);
    socket.destroy();
  });

  it('drops a consumer that stops reading once its unsent events pass the bound, and keeps one that reads', async () => {
    const events = new EventLog({ capacity: 1000 });
    const { url, port } = await serve(events, { maxBufferBytes: 64 * 1024 });
    const fast = await openSse(`${url}/v1/events/stream`);
    // The slow one sends its request and never reads a byte.
    const slow = net.connect(port, '127.0.0.1');
    slow.pause();
    let slowClosed = false;
    slow.on('close', () => (slowClosed = true));
    slow.on('error', () => undefined);
    await new Promise<void>((resolve) => slow.once('connect', () => resolve()));
    slow.write('GET /v1/events/stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n');
    const deadline = Date.now() + 5000;
    while (events.subscribers < 2 && Date.now() < deadline) await sleep(10);
    expect(events.subscribers).toBe(2);

    // ~12 MB of events in small bursts, far more than the socket buffers and the bound.
    const total = 20_000;
    for (let i = 1; i <= total; i++) {
      events.record(input(i, 300));
      if (i % 20 === 0) await sleep(1); // let the fast consumer read
    }
    const end = Date.now() + 10_000;
    while (events.subscribers > 1 && Date.now() < end) await sleep(20);
    expect(events.subscribers).toBe(1); // the slow one is gone
    await fast.waitFor((f) => f.length >= total, 'every event at the fast consumer', 20_000);
    const ids = fast.events<FenceEvent>().map((e) => e.id);
    expect(ids[0]).toBe(1);
    expect(ids[ids.length - 1]).toBe(total);
    expect(new Set(ids).size).toBe(total);
    slow.resume();
    const closedBy = Date.now() + 5000;
    while (!slowClosed && Date.now() < closedBy) await sleep(20);
    expect(slowClosed).toBe(true);
    fast.close();
  }, 60_000);
});
