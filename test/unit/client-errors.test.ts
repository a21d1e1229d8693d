/**
 * The client's typed errors cover the server's whole problem catalogue, and the README's
 * client example imports, from `fencegate/client` (the package export of the client
 * alone), names the client exports.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import * as client from '../../src/client/index.js';
import {
  CODE_ERRORS,
  FencegateError,
  FenceUnavailableError,
  LeaseLostError,
  LockHeldError,
  LockOrderError,
  StaleTokenError,
  StoreUnavailableError,
} from '../../src/client/index.js';
import { errorFor } from '../../src/client/errors.js';
import { PROBLEMS, problemBody, type ProblemCode } from '../../src/errors.js';

describe('client errors', () => {
  it('every problem code of the catalogue has a typed error, and no other code is listed', () => {
    expect(Object.keys(CODE_ERRORS).sort()).toEqual(Object.keys(PROBLEMS).sort());
  });

  it('each answer is raised as its class, with its fields', () => {
    const of = (code: ProblemCode, extra: Record<string, unknown> = {}, retryAfter: string | null = null) =>
      errorFor('m', PROBLEMS[code].status, problemBody(code, 'd', extra), retryAfter);
    const stale = of('stale-token', { lock: 'a', token: 41n, highest: 42n });
    expect(stale).toBeInstanceOf(StaleTokenError);
    expect(stale).toMatchObject({ code: 'stale-token', lock: 'a', token: 41n, highest: 42n, status: 409 });
    expect(of('lease-expired')).toBeInstanceOf(StaleTokenError);
    expect(of('token-invalid')).toBeInstanceOf(StaleTokenError);
    expect(of('lock-held', { retryAfterMs: 250 })).toMatchObject({ retryAfterMs: 250 });
    expect(of('lock-held')).toBeInstanceOf(LockHeldError);
    expect(of('lock-order', { heldKey: 'z' })).toMatchObject({ heldKey: 'z' });
    expect(of('lock-order')).toBeInstanceOf(LockOrderError);
    expect(of('replay-ended')).toBeInstanceOf(LeaseLostError);
    expect(of('fence-unavailable', {}, '2')).toMatchObject({ retryAfterMs: 2000 });
    expect(of('fence-unavailable')).toBeInstanceOf(FenceUnavailableError);
    expect(of('store-unavailable')).toBeInstanceOf(StoreUnavailableError);
    expect(errorFor('m', 500, null)).toBeInstanceOf(FencegateError);
  });

  it('the README’s client example imports fencegate/client, whose names the client exports', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const example = /```ts\n(import \{([^}]+)\} from '([^']+)';)/.exec(readme);
    expect(example?.[3]).toBe('fencegate/client');
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
    expect(pkg.exports['./client']).toBe('./dist/client/index.js');
    for (const name of (example?.[2] ?? '').split(',').map((n) => n.trim())) {
      expect(Object.keys(client), name).toContain(name);
    }
  });
});
