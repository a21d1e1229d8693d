/**
 * The control listener with an auth file, played by an attacker: no credential or a bad
 * one is 401 on every protected route, a principal outside its grants is 403 on each,
 * another principal's lease can be neither replayed, renewed nor released (on the
 * embedded, Postgres and Redis stores), and live tokens, owners and events are shown
 * only under the principal's read and events prefixes. docs/security.md, "Findings".
 */
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Authenticator } from '../../src/auth/authenticate.js';
import { parseAuthText } from '../../src/auth/file.js';
import { generateApiKey } from '../../src/auth/keys.js';
import { ACCESS_RULES } from '../../src/auth/plugin.js';
import { buildControl } from '../../src/control/control-server.js';
import { Issuer } from '../../src/issuer/service.js';
import { EventLog } from '../../src/observe/events.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { openSse } from '../helpers/sse.js';
import { STORE_FIXTURES, type Harness } from '../helpers/stores.js';
import { answerViolations, checkAnswers } from '../helpers/openapi.js';
import type { Store } from '../../src/store/types.js';

type Who = 'alice' | 'bob' | 'reader' | 'ops';
const keys = {} as Record<Who, string>;
let authText = '';

beforeAll(async () => {
  const made = {} as Record<Who, string>;
  for (const who of ['alice', 'bob', 'reader', 'ops'] as Who[]) {
    const k = await generateApiKey();
    keys[who] = k.key;
    made[who] = k.hash;
  }
  authText = `principals:
  - name: alice
    keys: ['${made.alice}']
    grants:
      - { verbs: [lease, read, events], prefix: orders/ }
  - name: bob
    keys: ['${made.bob}']
    grants:
      - { verbs: [lease], prefix: orders/ }
  - name: reader
    keys: ['${made.reader}']
    grants:
      - { verbs: [read], prefix: '*' }
      - { verbs: [events], prefix: payments/ }
  - name: ops
    keys: ['${made.ops}']
    grants:
      - { verbs: [admin], prefix: '*' }
`;
}, 60_000);

interface Control {
  app: FastifyInstance;
  events: EventLog;
  close(): Promise<void>;
}

/** The control listener on `store`, with the auth file `text` (null: without one). */
async function control(store: Store, text: string | null = authText): Promise<Control> {
  const metrics = createMetrics({ defaultMetrics: false });
  const issuer = new Issuer(store, metrics);
  const events = new EventLog();
  const app = checkAnswers(
    await buildControl({
      store,
      issuer,
      metrics,
      events,
      defaultTtlMs: 10_000,
      logLevel: 'silent',
      auth: text === null ? null : new Authenticator(parseAuthText('auth.yaml', text)),
    }),
  );
  return {
    app,
    events,
    async close() {
      issuer.shutdown();
      await app.close();
    },
  };
}

function as(who: Who | null): Record<string, string> {
  return who === null ? {} : { authorization: `Bearer ${keys[who]}` };
}

function call(app: FastifyInstance, who: Who | null, method: 'GET' | 'POST', url: string, body?: unknown) {
  return app.inject({
    method,
    url,
    headers: { ...as(who), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
  });
}

const LEASE = 'a-lease-id-nobody-has';
/** One request per protected route, on keys under `prefix`. */
function protectedCalls(prefix: string): [string, 'GET' | 'POST', string, unknown?][] {
  const k = encodeURIComponent(`${prefix}1`);
  return [
    ['acquire', 'POST', `/v1/locks/${k}/acquire`, { owner: 'w', ttlMs: 5000 }],
    ['renew', 'POST', `/v1/locks/${k}/renew`, { leaseId: LEASE }],
    ['release', 'POST', `/v1/locks/${k}/release`, { leaseId: LEASE }],
    ['inspect', 'GET', `/v1/locks/${k}`],
    ['list', 'GET', `/v1/locks?prefix=${encodeURIComponent(prefix)}`],
    ['events', 'GET', '/v1/events'],
    ['status', 'GET', '/v1/status'],
  ];
}

describe('control listener with an auth file', () => {
  let c: Control;
  beforeAll(async () => {
    c = await control(new MemoryStore());
  });
  afterAll(async () => c?.close());

  it('answers 401 with WWW-Authenticate to no credential, an unknown key, a wrong key and another scheme, alike', async () => {
    const wrong = `${keys.alice.slice(0, -4)}${keys.alice.endsWith('AAAA') ? 'BBBB' : 'AAAA'}`;
    const unknown = (await generateApiKey()).key;
    const credentials = [
      {},
      { authorization: `Bearer ${unknown}` },
      { authorization: `Bearer ${wrong}` },
      { authorization: 'Bearer not-even-a-key-of-ours-0000' },
      { authorization: `Basic ${Buffer.from(`alice:${keys.alice}`).toString('base64')}` },
    ];
    for (const [name, method, url, body] of [
      ...protectedCalls('orders/'),
      ['stream', 'GET', '/v1/events/stream'] as const,
    ]) {
      const bodies = new Set<string>();
      for (const headers of credentials) {
        const r = await c.app.inject({
          method,
          url,
          headers: { ...headers, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
        });
        expect(r.statusCode, `${name} ${JSON.stringify(headers)}`).toBe(401);
        expect(r.headers['www-authenticate']).toBe('Bearer realm="fencegate"');
        expect(r.headers['content-type']).toMatch(/^application\/problem\+json/);
        expect(r.json()).toMatchObject({ type: 'urn:fencegate:unauthenticated', status: 401 });
        bodies.add(r.body);
      }
      expect(bodies.size, `${name}: one answer whatever the credential`).toBe(1);
    }
    // Nothing was granted by any of it; each refusal was counted.
    expect((await call(c.app, 'ops', 'GET', '/v1/locks/orders%2F1')).statusCode).toBe(404);
    const metrics = (await c.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/^fencegate_auth_refusals_total\{reason="unauthenticated"\} (\d+)$/m);
    const counted = Number(
      /fencegate_auth_refusals_total\{reason="unauthenticated"\} (\d+)/.exec(metrics)?.[1],
    );
    expect(counted).toBe(8 * credentials.length);
  });

  it('acquire-many needs acquire on every key of the body; nothing is taken otherwise', async () => {
    const many = (who: Who, keys: string[]) =>
      call(c.app, who, 'POST', '/v1/locks/acquire-many', { keys, owner: 'w', ttlMs: 5000 });
    const outside = await many('bob', ['orders/m1', 'payments/m1']);
    expect(outside.statusCode).toBe(403);
    expect(outside.json()).toMatchObject({
      type: 'urn:fencegate:forbidden',
      principal: 'bob',
      verb: 'acquire',
      lock: 'payments/m1',
    });
    expect((await call(c.app, 'ops', 'GET', '/v1/locks/orders%2Fm1')).statusCode).toBe(404);
    expect((await many('reader', ['orders/m1'])).statusCode).toBe(403);
    const ok = await many('bob', ['orders/m2', 'orders/m1']);
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toMatchObject({ owner: '@bob/w', locks: [{ key: 'orders/m1' }, { key: 'orders/m2' }] });
  });

  it('answers 403 forbidden on every protected route outside the principal grants', async () => {
    // bob: lease on orders/ only.
    for (const [name, method, url, body] of protectedCalls('payments/')) {
      const r = await call(c.app, 'bob', method, url, body);
      expect(r.statusCode, name).toBe(403);
      expect(r.json()).toMatchObject({ type: 'urn:fencegate:forbidden', principal: 'bob' });
    }
    // Under its own prefix bob may take leases but not read tokens, events or status.
    for (const [name, method, url, body] of protectedCalls('orders/').filter(([n]) =>
      ['inspect', 'list', 'events', 'status'].includes(n),
    )) {
      expect((await call(c.app, 'bob', method, url, body)).statusCode, name).toBe(403);
    }
    expect((await call(c.app, 'bob', 'GET', '/v1/events/stream')).statusCode).toBe(403);
    // reader: read everywhere, but no lease anywhere.
    const r = await call(c.app, 'reader', 'POST', '/v1/locks/orders%2F1/acquire', { owner: 'w' });
    expect(r.statusCode).toBe(403);
    expect(r.json()).toMatchObject({ verb: 'acquire', lock: 'orders/1' });
    // The grant decides, not a look-alike prefix.
    expect((await call(c.app, 'bob', 'POST', '/v1/locks/orders/acquire', { owner: 'w' })).statusCode).toBe(
      403,
    );
  });

  it('lets the granted principal through, and admin everywhere', async () => {
    const a = await call(c.app, 'bob', 'POST', '/v1/locks/orders%2Fok/acquire', { owner: 'w', ttlMs: 5000 });
    expect(a.statusCode).toBe(200);
    expect(a.json().owner).toBe('@bob/w');
    expect((await call(c.app, 'ops', 'GET', '/v1/locks/orders%2Fok')).json()).toMatchObject({
      held: true,
      owner: '@bob/w',
    });
    expect((await call(c.app, 'ops', 'GET', '/v1/status')).statusCode).toBe(200);
    expect((await call(c.app, 'reader', 'GET', '/v1/status')).statusCode).toBe(200);
    const p = await call(c.app, 'ops', 'POST', '/v1/locks/payments%2F9/acquire', { owner: 'o' });
    expect(p.statusCode).toBe(200);
  });

  it('serves probes, /v1/keys and the dashboard page without credentials by default', async () => {
    for (const url of ['/healthz', '/readyz', '/metrics', '/v1/keys', '/dashboard', '/dashboard/app.js']) {
      expect((await c.app.inject({ method: 'GET', url })).statusCode, url).toBe(200);
    }
    // An unknown path: 401 before 404, so it does not reveal which routes exist.
    expect((await c.app.inject({ method: 'GET', url: '/v1/nothing' })).statusCode).toBe(401);
    expect((await call(c.app, 'bob', 'GET', '/v1/nothing')).statusCode).toBe(404);
  });

  it('with `public: []` every endpoint but the dashboard page needs a credential (any principal)', async () => {
    const closed = await control(new MemoryStore(), `public: []\n${authText}`);
    try {
      for (const url of ['/healthz', '/readyz', '/metrics', '/v1/keys']) {
        expect((await closed.app.inject({ method: 'GET', url })).statusCode, url).toBe(401);
        expect((await call(closed.app, 'bob', 'GET', url)).statusCode, url).toBe(200);
      }
      expect((await closed.app.inject({ method: 'GET', url: '/dashboard' })).statusCode).toBe(200);
    } finally {
      await closed.close();
    }
  });

  it('has a rule for every route, and refuses to start with a route that has none', async () => {
    const routes = new Set<string>();
    const metrics = createMetrics({ defaultMetrics: false });
    const store = new MemoryStore();
    const issuer = new Issuer(store, metrics);
    const app = checkAnswers(
      await buildControl({
        store,
        issuer,
        metrics,
        events: new EventLog(),
        defaultTtlMs: 10_000,
        logLevel: 'silent',
        auth: new Authenticator(parseAuthText('auth.yaml', authText)),
      }),
    );
    try {
      for (const rule of Object.keys(ACCESS_RULES)) {
        const [method, url] = rule.split(' ') as ['GET' | 'POST', string];
        expect(app.hasRoute({ method, url }), rule).toBe(true);
        routes.add(rule);
      }
      expect(routes.size).toBe(Object.keys(ACCESS_RULES).length);
      await expect(
        app.register(async (child) => {
          child.get('/v1/secret', async () => ({ secret: true }));
        }),
      ).rejects.toThrow(/GET \/v1\/secret has no access rule/);
    } finally {
      issuer.shutdown();
      await app.close().catch(() => undefined);
    }
  });

  it('shows live tokens and events only under the principal prefixes', async () => {
    await call(c.app, 'ops', 'POST', '/v1/locks/payments%2F1/acquire', { owner: 'o', ttlMs: 5000 });
    await call(c.app, 'alice', 'POST', '/v1/locks/orders%2F7/acquire', { owner: 'a', ttlMs: 5000 });
    // Events: a release by a lease id that does not hold each lock.
    await call(c.app, 'alice', 'POST', '/v1/locks/orders%2F7/release', { leaseId: LEASE });
    await call(c.app, 'ops', 'POST', '/v1/locks/payments%2F1/release', { leaseId: LEASE });

    const keysOf = async (who: Who, url: string) =>
      ((await call(c.app, who, 'GET', url)).json() as { locks: { key: string }[] }).locks.map((l) => l.key);
    expect(await keysOf('alice', '/v1/locks')).toEqual(expect.arrayContaining(['orders/7']));
    expect((await keysOf('alice', '/v1/locks')).every((k) => k.startsWith('orders/'))).toBe(true);
    expect(await keysOf('alice', '/v1/locks?prefix=payments%2F')).toEqual([]);
    expect(await keysOf('reader', '/v1/locks')).toEqual(expect.arrayContaining(['orders/7', 'payments/1']));
    expect((await call(c.app, 'alice', 'GET', '/v1/locks/payments%2F1')).statusCode).toBe(403);
    expect((await call(c.app, 'alice', 'GET', '/v1/locks/orders%2F7')).json().token).toMatch(/^\d+$/);

    // The release events (an earlier test's locks of `ops` may add a lock-order event).
    const locksOf = async (who: Who) =>
      (
        (await call(c.app, who, 'GET', '/v1/events?type=release-not-owner')).json() as {
          events: { lock: string }[];
        }
      ).events.map((e) => e.lock);
    expect(await locksOf('alice')).toEqual(['orders/7']);
    expect(await locksOf('reader')).toEqual(['payments/1']);
    expect(new Set(await locksOf('ops'))).toEqual(new Set(['orders/7', 'payments/1']));

    // The live stream too.
    await c.app.listen({ host: '127.0.0.1', port: 0 });
    const base = `http://127.0.0.1:${(c.app.server.address() as AddressInfo).port}`;
    const stream = await openSse(`${base}/v1/events/stream?since=0`, as('alice'));
    try {
      expect(stream.status).toBe(200);
      await call(c.app, 'ops', 'POST', '/v1/locks/payments%2F1/release', { leaseId: 'x' });
      await call(c.app, 'alice', 'POST', '/v1/locks/orders%2F7/release', { leaseId: 'y' });
      await stream.waitFor((f) => f.filter((x) => x.event === 'message').length >= 2, 'two orders events');
      expect(stream.events<{ lock: string }>().map((e) => e.lock)).toEqual(['orders/7', 'orders/7']);
    } finally {
      stream.close();
    }
    const denied = await openSse(`${base}/v1/events/stream`, as('bob'));
    expect(denied.status).toBe(403);
    denied.close();
  });
});

describe.each(STORE_FIXTURES)('owners bound to principals ($name store)', (fixture) => {
  let h: Harness;
  let c: Control;
  beforeAll(async () => {
    h = await fixture.open();
    c = await control(h.store);
  }, 120_000);
  afterAll(async () => {
    await c?.close();
    await h?.close();
  });

  it("another principal's replay, renew and release of a lease are refused; its own work", async () => {
    const url = (op: string) => `/v1/locks/orders%2Fbound/${op}`;
    const taken = await call(c.app, 'alice', 'POST', url('acquire'), {
      owner: 'worker-1',
      ttlMs: 10_000,
      requestId: 'req-1',
    });
    expect(taken.statusCode).toBe(200);
    const lease = taken.json() as { leaseId: string; token: string; owner: string };
    expect(lease.owner).toBe('@alice/worker-1');

    // bob sends alice's exact request again: he is not given her lease.
    const replay = await call(c.app, 'bob', 'POST', url('acquire'), {
      owner: 'worker-1',
      ttlMs: 10_000,
      requestId: 'req-1',
    });
    expect(replay.statusCode).toBe(409);
    expect(replay.json().type).toBe('urn:fencegate:lock-held');
    expect(replay.body).not.toContain(lease.leaseId);

    // bob learned the lease id (say, from a log): he can neither renew nor release it.
    for (const op of ['renew', 'release']) {
      const r = await call(c.app, 'bob', 'POST', url(op), { leaseId: lease.leaseId });
      expect(r.statusCode, op).toBe(403);
      expect(r.json()).toMatchObject({ type: 'urn:fencegate:forbidden', principal: 'bob', verb: op });
    }
    const state = (await call(c.app, 'alice', 'GET', '/v1/locks/orders%2Fbound')).json();
    expect(state).toMatchObject({ held: true, owner: '@alice/worker-1', token: lease.token });

    // alice's own retry is the same lease; her renew and release work.
    const mine = await call(c.app, 'alice', 'POST', url('acquire'), {
      owner: 'worker-1',
      ttlMs: 10_000,
      requestId: 'req-1',
    });
    expect(mine.json()).toMatchObject({ leaseId: lease.leaseId, replayed: true });
    expect((await call(c.app, 'alice', 'POST', url('renew'), { leaseId: lease.leaseId })).statusCode).toBe(
      200,
    );
    expect((await call(c.app, 'alice', 'POST', url('release'), { leaseId: lease.leaseId })).statusCode).toBe(
      200,
    );

    // Once it ended, bob's replay of her requestId still never yields her lease.
    const after = await call(c.app, 'bob', 'POST', url('acquire'), {
      owner: 'worker-1',
      ttlMs: 10_000,
      requestId: 'req-1',
    });
    expect(after.statusCode).toBe(200);
    expect(after.json()).toMatchObject({ owner: '@bob/worker-1', replayed: false });
    expect(after.json().leaseId).not.toBe(lease.leaseId);
    const ended = await call(c.app, 'alice', 'POST', url('acquire'), {
      owner: 'worker-1',
      ttlMs: 10_000,
      requestId: 'req-1',
    });
    expect(ended.json().type).toBe('urn:fencegate:replay-ended');
  });

  it('a lease taken without a principal is renewable by none, whatever its owner says', async () => {
    // Before the auth file: no credentials, owners recorded as sent.
    const before = await control(h.store, null);
    const open = before.app;
    try {
      const url = (op: string) => `/v1/locks/orders%2Fearly/${op}`;
      const post = (op: string, body: unknown) => call(open, null, 'POST', url(op), body);
      // An owner that names alice the way bound owners do is refused outright.
      const looksBound = await post('acquire', { owner: '@alice/x', ttlMs: 10_000 });
      expect(looksBound.statusCode).toBe(400);
      expect(looksBound.json()).toMatchObject({ type: 'urn:fencegate:bad-request', field: 'owner' });
      const early = await post('acquire', { owner: 'alice/x', ttlMs: 10_000 });
      expect(early.statusCode).toBe(200);
      const lease = early.json() as { leaseId: string };
      // Now with the auth file: alice may not renew or release it, nor may anyone else.
      for (const who of ['alice', 'bob'] as const)
        for (const op of ['renew', 'release']) {
          const r = await call(c.app, who, 'POST', url(op), { leaseId: lease.leaseId });
          expect(r.statusCode, `${who} ${op}`).toBe(403);
        }
    } finally {
      await before.close();
    }
  });
});

describe('docs/openapi.json', () => {
  it('describes every answer this file got from the control API', () => {
    expect(answerViolations()).toEqual([]);
  });
});
