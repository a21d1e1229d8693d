/**
 * The control API's OpenAPI 3.1 document (docs/openapi.json, served at
 * GET /v1/openapi.json): valid by a maintained validator, served as the file is, naming
 * every control route, and describing what the control API answers (test/helpers/openapi.ts
 * checks each answer; the issuer and events tests run through it too).
 */
import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCESS_RULES } from '../../src/auth/plugin.js';
import { openTestControl, type TestControl } from '../helpers/control.js';
import { answerViolations, OPENAPI, violation } from '../helpers/openapi.js';

type Spec = Parameters<Validator['validate']>[0];
const FILE = readFileSync(new URL('../../docs/openapi.json', import.meta.url), 'utf8');
let app: FastifyInstance;
let control: TestControl;

beforeAll(async () => {
  control = await openTestControl('embedded', { workers: () => ({ ready: 1, configured: 1 }) });
  app = control.app;
});
afterAll(() => control.close());

describe('docs/openapi.json', () => {
  it('is a valid OpenAPI 3.1 document', async () => {
    const validator = new Validator();
    const result = await validator.validate(JSON.parse(FILE) as Spec);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
  });

  it('the validator refuses a broken one (the check can fail)', async () => {
    const broken = JSON.parse(FILE) as { paths: Record<string, unknown> };
    broken.paths['/v1/locks'] = { get: { responses: 'none' } };
    expect((await new Validator().validate(broken as unknown as Spec)).valid).toBe(false);
  });

  it('is served at /v1/openapi.json exactly as the file is', async () => {
    const r = await app.inject({ method: 'GET', url: '/v1/openapi.json' });
    expect(r.statusCode).toBe(200);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(r.body).toBe(FILE);
  });

  it('describes every route of the control listener but the dashboard files', () => {
    const routes = Object.keys(ACCESS_RULES)
      .filter((r) => !r.includes('/dashboard'))
      .map((r) => {
        const [method, path] = r.split(' ') as [string, string];
        return `${method.toLowerCase()} ${path.replace(/:(\w+)/g, '{$1}')}`;
      });
    const documented = Object.entries(OPENAPI.paths).flatMap(([path, ops]) =>
      Object.keys(ops).map((m) => `${m} ${path}`),
    );
    expect(routes.filter((r) => !documented.includes(r))).toEqual([]);
    expect(documented.filter((d) => !routes.includes(d))).toEqual([]);
  });

  it('catches an answer the document does not describe', () => {
    expect(violation('GET', '/v1/locks/:key', 200, 'application/json', '{"key":"k"}')).toMatch(
      /must have required property/,
    );
    expect(violation('GET', '/v1/nowhere', 200, 'application/json', '{}')).toMatch(/no operation/);
    expect(
      violation('POST', '/v1/locks/:key/acquire', 409, 'application/problem+json', '{"type":"x"}'),
    ).toMatch(/must have required property/);
  });

  it('describes what the control API answers: grants, refusals, lists, status, probes', async () => {
    const post = (url: string, body: unknown) =>
      app.inject({
        method: 'POST',
        url,
        payload: JSON.stringify(body),
        headers: { 'content-type': 'application/json' },
      });
    const a = await post('/v1/locks/order%3A1/acquire', { owner: 'w1', ttlMs: 5000 });
    expect(a.statusCode).toBe(200);
    const lease = a.json() as { leaseId: string };
    expect((await post('/v1/locks/order%3A1/acquire', { owner: 'w2' })).statusCode).toBe(409);
    expect((await post('/v1/locks/order%3A1/renew', { leaseId: lease.leaseId })).statusCode).toBe(200);
    expect((await app.inject({ method: 'GET', url: '/v1/locks/order%3A1' })).statusCode).toBe(200);
    expect((await app.inject({ method: 'GET', url: '/v1/locks?limit=10' })).statusCode).toBe(200);
    expect((await post('/v1/locks/order%3A1/release', { leaseId: lease.leaseId })).statusCode).toBe(200);
    expect((await post('/v1/locks/order%3A1/release', { leaseId: lease.leaseId })).statusCode).toBe(409);
    expect((await post('/v1/locks/k/acquire', { bogus: 1 })).statusCode).toBe(400);
    for (const url of [
      '/v1/events',
      '/v1/keys',
      '/v1/status',
      '/healthz',
      '/readyz',
      '/metrics',
      '/v1/nowhere',
    ])
      await app.inject({ method: 'GET', url });
    expect(answerViolations()).toEqual([]);
  });
});
