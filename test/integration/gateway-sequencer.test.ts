/**
 * Sequencer routes played by an attacker (issue 12): a stale or non-owner client that
 * knows the live token (tA+1, the `highest` a 409 disclosed, GET /v1/locks/{key},
 * /v1/events, or a 403/409 oracle) gets nothing through, and nothing it sends reaches
 * the upstream; forged, foreign, expired and unknown-key sequencers are 403; the
 * holder's writes pass; key rotation keeps old sequencers working until pruned. On every
 * store: the keys live in a key file, the fence in the store.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FencegateClient } from '../../src/client/index.js';
import { buildControl } from '../../src/control/control-server.js';
import { Issuer } from '../../src/issuer/service.js';
import { createMetrics } from '../../src/observe/metrics.js';
import {
  addNextKey,
  decodeSequencer,
  initKeyFile,
  KeyRing,
  promoteNextKey,
  pruneRetiredKeys,
  readKeyFile,
  SequencerIssuer,
  signSequencer,
  writeKeyFile,
} from '../../src/sequencer/index.js';
import type { Store } from '../../src/store/types.js';
import {
  send,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from '../helpers/gateway-harness.js';
import { closeSharedStores, GATEWAY_STORES, type OpenedStore } from '../helpers/gateway-stores.js';
import { sleep, waitUntil } from '../helpers/wait.js';

afterAll(closeSharedStores);

function policy(upstreamUrl: string): string {
  return `version: 1
upstreams:
  orders:
    kind: http
    url: ${upstreamUrl}
    breaker: { volumeThreshold: 1000 }
routes:
  - name: order-writes
    methods: [PUT, POST, DELETE]
    path: /orders/:orderId
    upstream: orders
    lock: "order:{orderId}"
    fencing: { check: sequencer }
  - name: order-reads
    methods: [GET]
    path: /orders/*
    upstream: orders
  - name: shadow-writes
    methods: [PUT]
    path: /shadow/:id
    upstream: orders
    lock: "shadow:{id}"
    fencing: { check: sequencer, enforce: false }
`;
}

interface Grant {
  key: string;
  leaseId: string;
  token: string;
  expiresAt: string;
  sequencer: string;
}

describe.each(GATEWAY_STORES)('sequencer routes on $name store', (factory) => {
  let opened: OpenedStore;
  let store: Store;
  let dir: string;
  let keyFile: string;
  let keys: KeyRing;
  let issuer: Issuer;
  let control: FastifyInstance;
  let upstream: TestUpstream;
  let gw: TestGateway;
  let prefix: string;

  beforeEach(async () => {
    opened = await factory.open();
    store = opened.store;
    dir = await mkdtemp(join(tmpdir(), 'fg-seq-gw-'));
    keyFile = join(dir, 'keys.json');
    await writeKeyFile(keyFile, initKeyFile(), { exclusive: true });
    keys = await KeyRing.open(keyFile);
    upstream = await startUpstream();
    gw = await startGateway({ store, policy: policy(upstream.url), sequencerKeys: keys });
    const metrics = createMetrics({ defaultMetrics: false });
    issuer = new Issuer(store, metrics);
    control = await buildControl({
      store,
      issuer,
      metrics,
      events: gw.events,
      defaultTtlMs: 10_000,
      logLevel: 'silent',
      sequencers: new SequencerIssuer(keys, store),
    });
    prefix = `${Math.random().toString(36).slice(2, 8)}`;
  });

  afterEach(async () => {
    issuer.shutdown();
    await control.close();
    await gw.close();
    await upstream.close();
    await opened.close();
    await rm(dir, { recursive: true, force: true });
  });

  const id = () => `${prefix}-${Math.random().toString(36).slice(2, 8)}`;

  async function api(method: 'GET' | 'POST', url: string, body?: unknown) {
    const r = await control.inject({
      method,
      url,
      ...(body === undefined
        ? {}
        : { payload: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    });
    return { status: r.statusCode, body: r.json() as Record<string, unknown> };
  }

  async function acquire(orderId: string, owner: string, ttlMs = 30_000): Promise<Grant> {
    const r = await api('POST', `/v1/locks/${encodeURIComponent(`order:${orderId}`)}/acquire`, {
      owner,
      ttlMs,
    });
    expect(r.status).toBe(200);
    expect(r.body.sequencer).toMatch(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    return r.body as unknown as Grant;
  }

  const release = (g: Grant) =>
    api('POST', `/v1/locks/${encodeURIComponent(g.key)}/release`, { leaseId: g.leaseId });

  const put = (orderId: string, headers: Record<string, string>, body = 'x') =>
    send(gw, 'PUT', `/orders/${orderId}`, headers, body);

  /** A and then B held the lock; B wrote. A's lease ended (released) but its sequencer has not expired. */
  async function takenOver(orderId: string) {
    const a = await acquire(orderId, 'A');
    await release(a);
    const b = await acquire(orderId, 'B');
    const written = await put(orderId, { 'fencing-sequencer': b.sequencer }, 'from B');
    expect(written.status).toBe(200);
    return { a, b };
  }

  it('refuses a genuine sequencer issued for another store namespace, or before an epoch bump', async () => {
    const orderId = id();
    const g = await acquire(orderId, 'w1');
    // Another deployment sharing the key file (another --store-namespace) signs with the same key.
    const elsewhere = new SequencerIssuer(keys, store, 'another-deployment');
    const lease = await store.inspect(`order:${orderId}`);
    const foreign = await elsewhere.sign({
      key: `order:${orderId}`,
      owner: 'w1',
      leaseId: g.leaseId,
      token: BigInt(g.token),
      expiresAt: Date.parse(g.expiresAt),
    } as Parameters<SequencerIssuer['sign']>[0]);
    expect(lease?.highest ?? null).toBeNull();
    const refused = await put(orderId, { 'fencing-sequencer': foreign });
    expect(refused.status).toBe(403);
    expect(refused.body.detail).toMatch(/another store namespace/);
    expect(upstream.hits).toHaveLength(0);
    // After an epoch bump the old sequencer is refused (below the floor, or of another
    // epoch); a new grant's, signed in the new epoch, is admitted once this gateway saw it.
    await store.bumpEpoch();
    const fresh = await acquire(id(), 'w2');
    const freshId = fresh.key.slice('order:'.length);
    await waitUntil(
      'a sequencer of the new epoch admitted',
      async () => {
        const r = await put(freshId, { 'fencing-sequencer': fresh.sequencer });
        return r.status === 200;
      },
      { timeoutMs: 15_000, everyMs: 100 },
    );
    // Refused as of another epoch (403) once this process saw the bump, else as below the floor (409).
    const old = await put(orderId, { 'fencing-sequencer': g.sequencer });
    expect([403, 409]).toContain(old.status);
    expect(upstream.hits).toHaveLength(1);
  });

  it('a released sequencer is admitted after a new grant until the new holder writes (docs/security.md threat table)', async () => {
    const orderId = id();
    const a = await acquire(orderId, 'A');
    await release(a);
    const b = await acquire(orderId, 'B');
    // What the threat table says a released (or superseded) sequencer can still do: write
    // while the new holder has not written and its own exp has not passed.
    expect((await put(orderId, { 'fencing-sequencer': a.sequencer }, 'late A')).status).toBe(200);
    expect((await put(orderId, { 'fencing-sequencer': b.sequencer }, 'B')).status).toBe(200);
    // Once the new holder wrote, it is stale.
    expect((await put(orderId, { 'fencing-sequencer': a.sequencer }, 'later A')).status).toBe(409);
    expect(upstream.hits).toHaveLength(2);
  });

  it("forwards the holder's write with its Fencing-Token, never the sequencer", async () => {
    const orderId = id();
    const g = await acquire(orderId, 'w1');
    const res = await put(orderId, { 'fencing-sequencer': g.sequencer });
    expect(res.status).toBe(200);
    expect(upstream.hits).toHaveLength(1);
    expect(upstream.hits[0]?.headers['fencing-token']).toBe(g.token);
    expect(upstream.hits[0]?.headers['fencing-sequencer']).toBeUndefined();
    // The SDK's way: sequencer and the same token together.
    const both = await put(orderId, { 'fencing-sequencer': g.sequencer, 'fencing-token': g.token });
    expect(both.status).toBe(200);
    expect((await store.inspect(`order:${orderId}`))?.highest).toBe(BigInt(g.token));
    // Nor on an unfenced route: no upstream ever sees a sequencer.
    const read = await send(gw, 'GET', `/orders/${orderId}`, { 'fencing-sequencer': g.sequencer });
    expect(read.status).toBe(200);
    expect(upstream.hits).toHaveLength(3);
    expect(upstream.hits[2]?.method).toBe('GET');
    expect(upstream.hits[2]?.headers['fencing-sequencer']).toBeUndefined();
  });

  it('a renewed lease gets a new sequencer carrying the new expiry, and it is admitted', async () => {
    const orderId = id();
    const g = await acquire(orderId, 'w1', 5_000);
    const r = await api('POST', `/v1/locks/${encodeURIComponent(g.key)}/renew`, {
      leaseId: g.leaseId,
      ttlMs: 20_000,
    });
    expect(r.status).toBe(200);
    const renewed = r.body as unknown as Grant;
    expect(renewed.token).toBe(g.token);
    expect(renewed.sequencer).not.toBe(g.sequencer);
    const claims = decodeSequencer(renewed.sequencer);
    expect(claims.ok && claims.claims).toMatchObject({
      lock: `order:${orderId}`,
      token: BigInt(g.token),
      leaseId: g.leaseId,
      epoch: (await store.health()).epoch?.id ?? null,
      expiresAt: Date.parse(renewed.expiresAt),
    });
    expect((await put(orderId, { 'fencing-sequencer': renewed.sequencer })).status).toBe(200);
  });

  it('missing sequencer: 428 sequencer-required, also when a Fencing-Token is sent alone', async () => {
    const orderId = id();
    const g = await acquire(orderId, 'w1');
    const none = await put(orderId, {});
    expect(none.status).toBe(428);
    expect(none.body).toMatchObject({ type: 'urn:fencegate:sequencer-required', lock: `order:${orderId}` });
    const alone = await put(orderId, { 'fencing-token': g.token });
    expect(alone.status).toBe(428);
    expect(alone.body.detail).toMatch(/Fencing-Token alone/);
    const twice = await send(gw, 'PUT', `/orders/${orderId}`, {
      'fencing-sequencer': [g.sequencer, g.sequencer] as unknown as string,
    });
    expect(twice.status).toBe(400);
    const badToken = await put(orderId, { 'fencing-sequencer': g.sequencer, 'fencing-token': '0042' });
    expect(badToken.status).toBe(400);
    expect(badToken.body.type).toBe('urn:fencegate:token-malformed');
    expect(upstream.hits).toHaveLength(0);
  });

  it('stale owner: tA+1, the disclosed highest, the token read from the API or events: all refused, none forwarded', async () => {
    const orderId = id();
    const { a, b } = await takenOver(orderId);
    expect(BigInt(b.token)).toBe(BigInt(a.token) + 1n);

    // A's own sequencer is genuine but stale: 409, which discloses highest = tB…
    const stale = await put(orderId, { 'fencing-sequencer': a.sequencer }, 'from A');
    expect(stale.status).toBe(409);
    expect(stale.body).toMatchObject({ type: 'urn:fencegate:stale-token', highest: b.token });

    // …and the API and the event feed tell anyone the live token too.
    const live = await api('GET', `/v1/locks/${encodeURIComponent(`order:${orderId}`)}`);
    expect(live.body.token).toBe(b.token);
    const events = await api('GET', '/v1/events');
    const seen = (events.body.events as { lock: string; highest: string | null }[]).find(
      (e) => e.lock === `order:${orderId}`,
    );
    expect(seen?.highest).toBe(b.token);

    const tAplus1 = (BigInt(a.token) + 1n).toString();
    for (const token of new Set([
      tAplus1,
      String(stale.body.highest),
      String(live.body.token),
      String(seen?.highest),
    ])) {
      expect((await put(orderId, { 'fencing-token': token }, 'from A')).status).toBe(428);
      const withOwn = await put(
        orderId,
        { 'fencing-token': token, 'fencing-sequencer': a.sequencer },
        'from A',
      );
      expect(withOwn.status).toBe(403);
      expect(withOwn.body.type).toBe('urn:fencegate:token-invalid');
      // Rewriting the token inside A's sequencer breaks its signature.
      const [payload, sig] = a.sequencer.split('.') as [string, string];
      const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as Record<string, unknown>;
      const raised = Buffer.from(JSON.stringify({ ...claims, token })).toString('base64url');
      expect((await put(orderId, { 'fencing-sequencer': `${raised}.${sig}` }, 'from A')).status).toBe(403);
    }
    expect(upstream.hits).toHaveLength(1);
    expect(upstream.hits[0]?.headers['fencing-token']).toBe(b.token);
    expect((await store.inspect(`order:${orderId}`))?.highest).toBe(BigInt(b.token));
  });

  it('no 403/409 oracle: every candidate token gets the same 403 and moves nothing', async () => {
    const orderId = id();
    const { a, b } = await takenOver(orderId);
    // The attacker's own key (not in the issuer's file) signs whatever it likes.
    const attacker = join(dir, 'attacker.json');
    await writeKeyFile(attacker, initKeyFile(), { exclusive: true });
    const own = await KeyRing.open(attacker);
    const answers = new Set<string>();
    const first = BigInt(a.token) - 2n > 0n ? BigInt(a.token) - 2n : 1n;
    for (let t = first; t <= BigInt(b.token) + 3n; t++) {
      const claims = {
        ns: 'fencegate',
        lock: `order:${orderId}`,
        token: t,
        leaseId: b.leaseId,
        epoch: null,
        expiresAt: Date.parse(b.expiresAt),
      };
      for (const kid of [own.signer.kid, keys.signer.kid]) {
        const forged = signSequencer({ kid, ...claims }, own.signer.key);
        const r = await put(orderId, { 'fencing-sequencer': forged }, 'probe');
        answers.add(`${r.status} ${String(r.body.type)}`);
      }
    }
    expect([...answers]).toEqual(['403 urn:fencegate:token-invalid']);
    // Refusals are counted as forged and recorded without the sequencer (a credential).
    const events = gw.events.recent().filter((e) => e.lock === `order:${orderId}`);
    expect(events.length).toBeGreaterThan(0);
    expect(events.every((e) => e.reason === 'forged' && e.token === null)).toBe(true);
    expect(JSON.stringify(gw.events.recent())).not.toMatch(/[A-Za-z0-9_-]{40,}\.[A-Za-z0-9_-]{80,}/);
    expect(upstream.hits).toHaveLength(1);
    expect((await store.inspect(`order:${orderId}`))?.highest).toBe(BigInt(b.token));
  });

  it('a sequencer for another lock, an expired one, or garbage: 403 token-invalid, not forwarded', async () => {
    const orderId = id();
    const other = await acquire(id(), 'w2');
    const foreign = await put(orderId, { 'fencing-sequencer': other.sequencer });
    expect(foreign.status).toBe(403);
    expect(foreign.body.detail).toMatch(/is for lock/);

    const short = await acquire(orderId, 'w1', 100);
    const key = encodeURIComponent(short.key);
    while ((await api('GET', `/v1/locks/${key}`)).body.held === true) await sleep(25);
    const expired = await put(orderId, { 'fencing-sequencer': short.sequencer });
    expect(expired.status).toBe(403);
    expect(expired.body.detail).toMatch(/expired/);

    for (const garbage of ['x', 'a.b', short.token, `${short.sequencer}x`]) {
      expect((await put(orderId, { 'fencing-sequencer': garbage })).status).toBe(403);
    }
    expect(upstream.hits).toHaveLength(0);
    expect((await store.inspect(`order:${orderId}`))?.highest ?? null).toBe(null);
  });

  it('the client SDK sends the latest sequencer transparently, renewed ones included', async () => {
    await control.listen({ host: '127.0.0.1', port: 0 });
    const port = (control.server.address() as { port: number }).port;
    const fg = new FencegateClient({ url: `http://127.0.0.1:${port}` });
    const orderId = id();
    const lock = await fg.acquire(`order:${orderId}`, { owner: 'sdk', ttlMs: 30_000, autoRenew: false });
    const first = lock.sequencer;
    expect(first).toMatch(/\./);
    const url = `${gw.url}/orders/${orderId}`;
    expect((await lock.fetch(url, { method: 'PUT', body: 'one' })).status).toBe(200);
    await lock.renew(40_000);
    expect(lock.sequencer).not.toBe(first);
    expect((await lock.fetch(url, { method: 'PUT', body: 'two' })).status).toBe(200);
    expect(upstream.hits.map((h) => h.headers['fencing-token'])).toEqual([
      lock.fencingToken,
      lock.fencingToken,
    ]);
    expect(upstream.hits.every((h) => h.headers['fencing-sequencer'] === undefined)).toBe(true);
    await lock.release();
  });

  it('shadow mode: an unverifiable sequencer is counted and forwarded, the fence untouched', async () => {
    const shadowId = id();
    const other = await acquire(id(), 'w2');
    const res = await send(gw, 'PUT', `/shadow/${shadowId}`, { 'fencing-sequencer': other.sequencer }, 'x');
    expect(res.status).toBe(200);
    expect(upstream.hits).toHaveLength(1);
    expect(upstream.hits[0]?.headers['x-fencegate-fence']).toBe('shadow-refused');
    expect(upstream.hits[0]?.headers['fencing-sequencer']).toBeUndefined();
    const [event] = gw.events.recent().filter((e) => e.lock === `shadow:${shadowId}`);
    expect(event).toMatchObject({ reason: 'forged', enforced: false });
    expect(await store.inspect(`shadow:${shadowId}`)).toBeNull();
  });

  it('rotation: old sequencers work until their key is pruned, new ones use the new key; /v1/keys follows', async () => {
    const orderId = id();
    const before = await acquire(orderId, 'w1');
    const oldKid = keys.signer.kid;
    const added = addNextKey(await readKeyFile(keyFile));
    await writeKeyFile(keyFile, added.file);
    await keys.reload();
    let jwks = (await api('GET', '/v1/keys')).body.keys as {
      kid: string;
      kty: string;
      crv: string;
      x: string;
    }[];
    expect(jwks.map((k) => k.kid)).toEqual([oldKid, added.kid]);
    expect(jwks.every((k) => k.kty === 'OKP' && k.crv === 'Ed25519' && !('d' in k))).toBe(true);
    // Published first, signing only once promoted.
    const stillOld = await api('POST', `/v1/locks/${encodeURIComponent(before.key)}/renew`, {
      leaseId: before.leaseId,
      ttlMs: 30_000,
    });
    expect(
      JSON.parse(Buffer.from(String(stillOld.body.sequencer).split('.')[0]!, 'base64url').toString()).kid,
    ).toBe(oldKid);

    const promoted = promoteNextKey(added.file);
    await writeKeyFile(keyFile, promoted.file);
    await keys.reload();
    expect((await put(orderId, { 'fencing-sequencer': before.sequencer })).status).toBe(200);
    const renewed = await api('POST', `/v1/locks/${encodeURIComponent(before.key)}/renew`, {
      leaseId: before.leaseId,
      ttlMs: 30_000,
    });
    const fresh = String(renewed.body.sequencer);
    expect(JSON.parse(Buffer.from(fresh.split('.')[0]!, 'base64url').toString()).kid).toBe(added.kid);
    expect((await put(orderId, { 'fencing-sequencer': fresh })).status).toBe(200);

    await writeKeyFile(keyFile, pruneRetiredKeys(promoted.file, 0).file);
    await keys.reload();
    jwks = (await api('GET', '/v1/keys')).body.keys as typeof jwks;
    expect(jwks.map((k) => k.kid)).toEqual([added.kid]);
    const gone = await put(orderId, { 'fencing-sequencer': before.sequencer });
    expect(gone.status).toBe(403);
    expect(gone.body.detail).toMatch(/unknown key/);
    expect((await put(orderId, { 'fencing-sequencer': fresh })).status).toBe(200);
    expect(upstream.hits).toHaveLength(3);
  });
});
