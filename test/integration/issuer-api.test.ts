/**
 * The issuer's HTTP API on a real store: the happy paths as docs/issuer.md shows them,
 * and bad input of every kind answered 400 with a problem body, the process up.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestControl, type TestControl } from '../helpers/control.js';
import type { Harness } from '../helpers/stores.js';
import { answerViolations } from '../helpers/openapi.js';
import { sleep } from '../helpers/wait.js';

let h: Harness;
let app: FastifyInstance;
let control: TestControl;

beforeAll(async () => {
  control = await openTestControl('redis');
  ({ app, harness: h } = control);
});
afterAll(() => control.close());

const post = (url: string, payload: unknown, headers: Record<string, string> = {}) =>
  app.inject({
    method: 'POST',
    url,
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
    headers: { 'content-type': 'application/json', ...headers },
  });

describe('issuer API', () => {
  it('answers 409 tokens-exhausted, not "try again", once a lock issued 2^63-1', async () => {
    await h.seedIssued('spent', 2n ** 63n - 1n);
    const r = await post('/v1/locks/spent/acquire', { owner: 'w1', ttlMs: 5000 });
    expect(r.statusCode).toBe(409);
    expect(r.headers['content-type']).toMatch(/application\/problem\+json/);
    expect(r.json()).toMatchObject({ type: 'urn:fencegate:tokens-exhausted', lock: 'spent' });
    expect(r.headers['retry-after']).toBeUndefined();
  });

  it('acquire, inspect, renew, release', async () => {
    const a = await post('/v1/locks/order%3A42/acquire', { owner: 'w1', ttlMs: 5000 });
    expect(a.statusCode).toBe(200);
    const lease = a.json();
    expect(lease).toMatchObject({ key: 'order:42', owner: 'w1', ttlMs: 5000 });
    expect(lease.token).toMatch(/^[1-9][0-9]*$/);
    expect(typeof lease.leaseId).toBe('string');
    expect(Number.isNaN(Date.parse(lease.expiresAt))).toBe(false);

    const held = await post('/v1/locks/order%3A42/acquire', { owner: 'w2' });
    expect(held.statusCode).toBe(409);
    expect(held.headers['content-type']).toContain('application/problem+json');
    expect(held.json()).toMatchObject({ type: 'urn:fencegate:lock-held', status: 409, lock: 'order:42' });
    expect(held.json().retryAfterMs).toBeGreaterThan(0);
    expect(held.headers['retry-after']).toBeDefined();

    const i = await app.inject({ method: 'GET', url: '/v1/locks/order%3A42' });
    expect(i.json()).toMatchObject({
      key: 'order:42',
      held: true,
      owner: 'w1',
      token: lease.token,
      waiters: 0,
    });

    const r = await post('/v1/locks/order%3A42/renew', { leaseId: lease.leaseId, ttlMs: 8000 });
    expect(r.statusCode).toBe(200);
    expect(r.json()).toMatchObject({ key: 'order:42', leaseId: lease.leaseId, token: lease.token });

    const wrong = await post('/v1/locks/order%3A42/release', { leaseId: 'nope' });
    expect(wrong.statusCode).toBe(409);
    expect(wrong.json().type).toBe('urn:fencegate:not-owner');

    const rel = await post('/v1/locks/order%3A42/release', { leaseId: lease.leaseId });
    expect(rel.json()).toEqual({ released: true });
    const lost = await post('/v1/locks/order%3A42/renew', { leaseId: lease.leaseId });
    expect(lost.statusCode).toBe(409);
    expect(lost.json().type).toBe('urn:fencegate:lease-lost');
  });

  it('waits in the queue when waitMs > 0 and gets the lock on release', async () => {
    const a = (await post('/v1/locks/q1/acquire', { owner: 'a' })).json();
    const waiting = post('/v1/locks/q1/acquire', { owner: 'b', waitMs: 5000 });
    await sleep(100);
    await post('/v1/locks/q1/release', { leaseId: a.leaseId });
    const b = await waiting;
    expect(b.statusCode).toBe(200);
    expect(BigInt(b.json().token)).toBeGreaterThan(BigInt(a.token));
  });

  it('times out a waiting acquire with lock-held', async () => {
    await post('/v1/locks/q2/acquire', { owner: 'a' });
    const r = await post('/v1/locks/q2/acquire', { owner: 'b', waitMs: 150 });
    expect(r.statusCode).toBe(409);
    expect(r.json().type).toBe('urn:fencegate:lock-held');
  });

  it('replays an acquire with the same requestId', async () => {
    const body = { owner: 'a', requestId: 'req-1' };
    const one = (await post('/v1/locks/idem/acquire', body)).json();
    const two = await post('/v1/locks/idem/acquire', body);
    expect(two.statusCode).toBe(200);
    expect(two.json()).toMatchObject({ leaseId: one.leaseId, token: one.token, replayed: true });
  });

  it('answers 404 lock-not-found for a key never issued', async () => {
    const r = await app.inject({ method: 'GET', url: '/v1/locks/never-issued' });
    expect(r.statusCode).toBe(404);
    expect(r.json().type).toBe('urn:fencegate:lock-not-found');
  });

  const bad: [string, string, unknown, string][] = [
    ['malformed JSON', '/v1/locks/k/acquire', '{"owner": ', 'bad-request'],
    ['a JSON array', '/v1/locks/k/acquire', '[]', 'bad-request'],
    ['a JSON string', '/v1/locks/k/acquire', '"x"', 'bad-request'],
    ['null', '/v1/locks/k/acquire', 'null', 'bad-request'],
    ['missing owner', '/v1/locks/k/acquire', { ttlMs: 1000 }, 'bad-request'],
    ['owner a number', '/v1/locks/k/acquire', { owner: 7 }, 'bad-request'],
    ['empty owner', '/v1/locks/k/acquire', { owner: '' }, 'bad-request'],
    ['owner with a newline', '/v1/locks/k/acquire', { owner: 'a\nb' }, 'bad-request'],
    ['ttlMs a string', '/v1/locks/k/acquire', { owner: 'a', ttlMs: '1000' }, 'bad-request'],
    ['ttlMs fractional', '/v1/locks/k/acquire', { owner: 'a', ttlMs: 1000.5 }, 'bad-request'],
    ['ttlMs negative', '/v1/locks/k/acquire', { owner: 'a', ttlMs: -1 }, 'invalid-ttl'],
    ['ttlMs zero', '/v1/locks/k/acquire', { owner: 'a', ttlMs: 0 }, 'invalid-ttl'],
    ['ttlMs below the minimum', '/v1/locks/k/acquire', { owner: 'a', ttlMs: 99 }, 'invalid-ttl'],
    ['ttlMs enormous', '/v1/locks/k/acquire', { owner: 'a', ttlMs: 1e300 }, 'bad-request'],
    ['ttlMs above an hour', '/v1/locks/k/acquire', { owner: 'a', ttlMs: 3_600_001 }, 'invalid-ttl'],
    ['waitMs negative', '/v1/locks/k/acquire', { owner: 'a', waitMs: -5 }, 'bad-request'],
    ['waitMs enormous', '/v1/locks/k/acquire', { owner: 'a', waitMs: 1e12 }, 'bad-request'],
    ['requestId an object', '/v1/locks/k/acquire', { owner: 'a', requestId: {} }, 'bad-request'],
    ['an unknown field', '/v1/locks/k/acquire', { owner: 'a', ttl: 5 }, 'bad-request'],
    ['renew without leaseId', '/v1/locks/k/renew', {}, 'bad-request'],
    ['renew leaseId a number', '/v1/locks/k/renew', { leaseId: 5 }, 'bad-request'],
    ['renew ttlMs huge', '/v1/locks/k/renew', { leaseId: 'x', ttlMs: 9e15 }, 'invalid-ttl'],
    ['release without leaseId', '/v1/locks/k/release', { owner: 'a' }, 'bad-request'],
    ['release leaseId null', '/v1/locks/k/release', { leaseId: null }, 'bad-request'],
    ['a key over 256 bytes', `/v1/locks/${'k'.repeat(257)}/acquire`, { owner: 'a' }, 'invalid-key'],
    ['a key with a control character', '/v1/locks/a%01b/acquire', { owner: 'a' }, 'invalid-key'],
    ['a key of invalid UTF-8', '/v1/locks/%FF%FE/acquire', { owner: 'a' }, 'bad-request'],
    ['an empty key', '/v1/locks//acquire', { owner: 'a' }, 'invalid-key'],
  ];

  it.each(bad)('refuses %s with a problem', async (_name, url, payload, code) => {
    const r = await post(url, payload);
    expect(r.headers['content-type']).toContain('application/problem+json');
    const body = r.json();
    expect(body.type).toBe(`urn:fencegate:${code}`);
    expect(r.statusCode).toBe(body.status);
    expect([400, 404]).toContain(r.statusCode);
    // The process is still up and serving.
    expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });

  it.each([
    ['text/plain', 'owner=a'],
    ['application/x-www-form-urlencoded', 'owner=a'], // curl -d without -H
    ['application/xml', '<owner>a</owner>'],
  ])(
    'refuses a %s body with 415 unsupported-media-type on every endpoint that reads one',
    async (type, payload) => {
      for (const url of ['/v1/locks/k/acquire', '/v1/locks/k/renew', '/v1/locks/k/release']) {
        const r = await app.inject({ method: 'POST', url, payload, headers: { 'content-type': type } });
        expect(r.statusCode).toBe(415);
        expect(r.headers['content-type']).toContain('application/problem+json');
        expect(r.json()).toMatchObject({ type: 'urn:fencegate:unsupported-media-type', status: 415 });
        expect(r.json().detail).toContain(type);
      }
    },
  );

  it('refuses a body sent without a content-type with 415, naming what it reads', async () => {
    const r = await app.inject({ method: 'POST', url: '/v1/locks/k/acquire', payload: '{"owner":"a"}' });
    expect(r.statusCode).toBe(415);
    expect(r.json()).toMatchObject({
      type: 'urn:fencegate:unsupported-media-type',
      detail: 'a body without a content-type: this endpoint reads "content-type: application/json"',
    });
  });

  it('refuses a body that is too large', async () => {
    const big = await post('/v1/locks/k/acquire', { owner: 'a', pad: 'x'.repeat(100_000) });
    expect(big.statusCode).toBe(413);
    expect(big.json().type).toBe('urn:fencegate:payload-too-large');
  });

  it('an empty body is a bad request', async () => {
    const r = await app.inject({ method: 'POST', url: '/v1/locks/k/acquire' });
    expect(r.statusCode).toBe(400);
    expect(r.json().type).toBe('urn:fencegate:bad-request');
  });

  it('exposes the contract metrics', async () => {
    const m = await app.inject({ method: 'GET', url: '/metrics' });
    for (const name of [
      'fencegate_acquire_duration_seconds',
      'fencegate_lock_contention_total',
      'fencegate_release_owner_mismatch_total',
      'fencegate_lease_renew_failures_total',
      'fencegate_lock_waiters',
      'fencegate_acquire_timeouts_total',
    ]) {
      expect(m.body).toContain(name);
    }
    expect(m.body).toMatch(/fencegate_release_owner_mismatch_total [1-9]/);
  });

  it('is ready while the store answers', async () => {
    const r = await app.inject({ method: 'GET', url: '/readyz' });
    expect(r.statusCode).toBe(200);
    expect(r.json()).toMatchObject({ ok: true, store: { kind: 'redis', ok: true } });
  });
});

describe('docs/openapi.json', () => {
  it('describes every answer this file got from the control API', () => {
    expect(answerViolations()).toEqual([]);
  });
});
