/**
 * The control listener's limits, over real sockets: the Host allow-list (DNS rebinding;
 * the browser case is test/e2e/dns-rebinding.test.ts), the caps on event streams (in
 * all and per principal) with their 429, one serialisation per event for all
 * subscribers, the connection cap, and CONNECT answered as a problem. docs/security.md,
 * "Control-plane limits".
 */
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { Authenticator } from '../../src/auth/authenticate.js';
import { parseAuthText } from '../../src/auth/file.js';
import { generateApiKey } from '../../src/auth/keys.js';
import { buildControl } from '../../src/control/control-server.js';
import { hostAllowList } from '../../src/http/allowed-hosts.js';
import { Issuer } from '../../src/issuer/service.js';
import { EventLog } from '../../src/observe/events.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { staleEvent } from '../helpers/events.js';
import { openSse, type SseClient } from '../helpers/sse.js';
import { sleep, waitUntil } from '../helpers/wait.js';

let alice = '';
let bob = '';
let authText = '';
beforeAll(async () => {
  const a = await generateApiKey();
  const b = await generateApiKey();
  alice = a.key;
  bob = b.key;
  authText = `principals:
  - { name: alice, keys: ['${a.hash}'], grants: [{ verbs: [events, lease], prefix: '*' }] }
  - { name: bob, keys: ['${b.hash}'], grants: [{ verbs: [events], prefix: '*' }] }
`;
}, 30_000);

type Options = Partial<Parameters<typeof buildControl>[0]> & { authText?: string };

let running: { app: FastifyInstance; issuer: Issuer } | null = null;
afterEach(async () => {
  running?.issuer.shutdown();
  await running?.app.close();
  running = null;
});

async function control(opts: Options = {}) {
  const store = new MemoryStore();
  const metrics = createMetrics({ defaultMetrics: false });
  const issuer = new Issuer(store, metrics);
  const events = new EventLog();
  const auth =
    opts.authText === undefined ? null : new Authenticator(parseAuthText('auth.yaml', opts.authText));
  const app = await buildControl({
    store,
    issuer,
    metrics,
    events,
    defaultTtlMs: 10_000,
    logLevel: 'silent',
    auth,
    allowedHosts: hostAllowList(null, { authenticated: auth !== null, bindHost: '127.0.0.1' }),
    ...opts,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  running = { app, issuer };
  const port = (app.server.address() as net.AddressInfo).port;
  return { app, events, port, url: `http://127.0.0.1:${port}` };
}

/** One raw HTTP/1.1 exchange: the whole answer the server writes before it closes (or 2 s). */
function raw(port: number, request: string): Promise<string> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => s.write(request));
    let text = '';
    s.on('data', (d: Buffer) => {
      text += d.toString('utf8');
      if (/\r\n\r\n/.test(text) && /content-length: (\d+)/i.test(text)) {
        const len = Number(/content-length: (\d+)/i.exec(text)![1]);
        if (Buffer.byteLength(text.slice(text.indexOf('\r\n\r\n') + 4)) >= len) s.end();
      }
    });
    s.on('error', () => undefined);
    s.on('close', () => resolve(text));
    setTimeout(() => s.destroy(), 2000);
  });
}

const acquire = (host: string) =>
  `POST /v1/locks/order%3Arebound/acquire HTTP/1.1\r\nHost: ${host}\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n{"owner":"evil"}`.replace(
    'content-length: 15',
    'content-length: 16',
  );

describe('control listener: Host allow-list', () => {
  it('without an auth file answers loopback names only: another Host gets 421, and no lock is taken', async () => {
    const { port, app } = await control();
    const evil = await raw(port, acquire(`evil.example:${port}`));
    expect(evil).toMatch(/^HTTP\/1\.1 421 /);
    expect(evil).toMatch(/content-type: application\/problem\+json/);
    expect(evil).toContain('"type":"urn:fencegate:host-not-allowed"');
    expect(evil).toContain(`"host":"evil.example:${port}"`);
    for (const path of ['/v1/locks', '/dashboard', '/v1/events/stream', '/metrics']) {
      const r = await raw(port, `GET ${path} HTTP/1.1\r\nHost: rebind.test:${port}\r\n\r\n`);
      expect(r, path).toMatch(/^HTTP\/1\.1 421 /);
    }
    const inspect = await app.inject({
      method: 'GET',
      url: '/v1/locks/order%3Arebound',
      headers: { host: 'localhost' },
    });
    expect(inspect.statusCode).toBe(404);
    // Loopback names reach the issuer: the first takes the lock, the others find it held.
    expect(await raw(port, acquire(`localhost:${port}`))).toMatch(/^HTTP\/1\.1 200 /);
    for (const host of [`127.0.0.1:${port}`, `[::1]:${port}`])
      expect(await raw(port, acquire(host)), host).toMatch(/^HTTP\/1\.1 409 /);
  });

  it('answers the names given with --allowed-hosts; with an auth file, any Host unless names are given', async () => {
    const listed = await control({
      allowedHosts: hostAllowList(['fencegate.internal'], { authenticated: false, bindHost: '127.0.0.1' }),
    });
    expect(await raw(listed.port, 'GET /healthz HTTP/1.1\r\nHost: fencegate.internal\r\n\r\n')).toMatch(
      /^HTTP\/1\.1 200 /,
    );
    expect(await raw(listed.port, 'GET /healthz HTTP/1.1\r\nHost: other.internal\r\n\r\n')).toMatch(
      /^HTTP\/1\.1 421 /,
    );
    await running?.app.close();
    running = null;
    const authed = await control({ authText });
    expect(await raw(authed.port, 'GET /healthz HTTP/1.1\r\nHost: fencegate.example\r\n\r\n')).toMatch(
      /^HTTP\/1\.1 200 /,
    );
  });
});

describe('control listener: event streams', () => {
  it('caps the streams open at once, in all and per principal, with 429 too-many-streams', async () => {
    const { url } = await control({ authText, eventStreams: { max: 5, perPrincipal: 3 } });
    const as = (key: string) => ({ authorization: `Bearer ${key}` });
    const open: SseClient[] = [];
    try {
      for (let i = 0; i < 3; i++) open.push(await openSse(`${url}/v1/events/stream`, as(alice)));
      expect(open.map((s) => s.status)).toEqual([200, 200, 200]);
      const fourth = await fetch(`${url}/v1/events/stream`, { headers: as(alice) });
      expect(fourth.status).toBe(429);
      expect(fourth.headers.get('retry-after')).toBe('5');
      expect(await fourth.json()).toMatchObject({
        type: 'urn:fencegate:too-many-streams',
        scope: 'principal',
        limit: 3,
      });
      for (let i = 0; i < 2; i++) open.push(await openSse(`${url}/v1/events/stream`, as(bob)));
      const sixth = await fetch(`${url}/v1/events/stream`, { headers: as(bob) });
      expect(await sixth.json()).toMatchObject({
        type: 'urn:fencegate:too-many-streams',
        scope: 'all',
        limit: 5,
      });
      // A stream closed gives its place back.
      open.shift()?.close();
      await waitUntil('a place freed', async () => {
        const r = await openSse(`${url}/v1/events/stream`, as(alice));
        if (r.status === 200) open.push(r);
        else r.close();
        return r.status === 200;
      });
    } finally {
      for (const s of open) s.close();
    }
  });

  it('without an auth file the global cap holds', async () => {
    const { url } = await control({ eventStreams: { max: 2, perPrincipal: 1 } });
    const a = await openSse(`${url}/v1/events/stream`);
    const b = await openSse(`${url}/v1/events/stream`);
    const c = await fetch(`${url}/v1/events/stream`);
    expect([a.status, b.status, c.status]).toEqual([200, 200, 429]);
    a.close();
    b.close();
  });

  it('serialises each event once, however many subscribers get it', async () => {
    const { url, events } = await control({ eventStreams: { max: 100, perPrincipal: 100 } });
    const subscribers = await Promise.all(
      Array.from({ length: 40 }, () => openSse(`${url}/v1/events/stream`)),
    );
    try {
      const stringify = vi.spyOn(JSON, 'stringify');
      events.record(staleEvent(7, 'order:7'));
      await Promise.all(subscribers.map((s) => s.waitFor((f) => f.length >= 1, 'the event')));
      const ofTheEvent = stringify.mock.calls.filter(
        ([v]) => (v as { lock?: unknown } | null)?.lock === 'order:7',
      );
      stringify.mockRestore();
      expect(ofTheEvent).toHaveLength(1);
      expect(new Set(subscribers.map((s) => s.frames[0]?.data)).size).toBe(1);
    } finally {
      for (const s of subscribers) s.close();
    }
  });
});

describe('control listener: connections', () => {
  it('takes at most --control-max-connections connections; more are closed at once', async () => {
    const { port } = await control({ maxConnections: 3 });
    const held: net.Socket[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const s = net.connect(port, '127.0.0.1');
        s.on('error', () => undefined);
        await new Promise((r) => s.once('connect', r));
        held.push(s);
      }
      await sleep(50);
      const extra = await raw(port, 'GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n');
      expect(extra).toBe('');
      held.pop()?.destroy();
      await waitUntil('a connection place freed', async () =>
        /^HTTP\/1\.1 200 /.test(await raw(port, 'GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n')),
      );
    } finally {
      for (const s of held) s.destroy();
    }
  });

  it('answers CONNECT with a 405 problem before closing', async () => {
    const { port } = await control();
    const r = await raw(port, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
    expect(r).toMatch(/^HTTP\/1\.1 405 /);
    expect(r).toContain('"type":"urn:fencegate:method-not-allowed"');
    expect(r).toMatch(/connection: close/i);
  });
});
