import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createGateway } from '../../src/gateway/index.js';
import { EventLog } from '../../src/observe/events.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { PolicyHolder } from '../../src/policies.js';
import { MemoryStore } from '../helpers/memory-store.js';

describe('gateway routing (inject: no sockets, no parser)', () => {
  let app: FastifyInstance;

  beforeAll(async () => {
    const policy = new PolicyHolder('test/fixtures/policies/valid');
    const loaded = await policy.reload();
    if (!loaded.ok) throw new Error('fixture policy invalid');
    app = await createGateway({
      store: new MemoryStore(),
      policy,
      metrics: createMetrics({ defaultMetrics: false }),
      events: new EventLog(),
    });
  });

  afterAll(() => app.close());

  it('refuses Content-Length together with Transfer-Encoding even if a parser let it through', async () => {
    const res = await app.inject({
      method: 'PUT',
      url: '/orders/1',
      headers: { 'content-length': '3', 'transfer-encoding': 'chunked', 'fencing-token': '1' },
      payload: 'abc',
    });
    expect(res.statusCode).toBe(400);
    expect(res.headers.connection).toBe('close');
    expect(res.json()).toMatchObject({ type: 'urn:fencegate:bad-request' });
  });

  it('no route → 404 problem+json', async () => {
    const res = await app.inject({ method: 'GET', url: '/nowhere' });
    expect(res.statusCode).toBe(404);
    expect(res.headers['content-type']).toContain('application/problem+json');
    expect(res.json()).toEqual({
      type: 'urn:fencegate:no-route',
      title: 'No route matches this request',
      status: 404,
      detail: 'no route for GET /nowhere',
    });
  });

  it('a fenced route without a token → 428 before anything else', async () => {
    const res = await app.inject({ method: 'PUT', url: '/orders/1' });
    expect(res.statusCode).toBe(428);
  });
});
