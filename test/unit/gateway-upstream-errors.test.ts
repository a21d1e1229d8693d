import { describe, expect, it } from 'vitest';
import { errorCodes, isUpstreamFailure, upstreamProblem } from '../../src/gateway/upstream-errors.js';

const err = (code: string, cause?: unknown) => Object.assign(new Error(code), { code, cause });

describe('upstream error classification', () => {
  it('walks the cause chain', () => {
    expect(errorCodes(err('FST_REPLY_FROM_INTERNAL_SERVER_ERROR', err('ECONNREFUSED')))).toEqual([
      'FST_REPLY_FROM_INTERNAL_SERVER_ERROR',
      'ECONNREFUSED',
    ]);
  });

  it.each([
    ['ECONNREFUSED', 502, 'upstream-unavailable'],
    ['ECONNRESET', 502, 'upstream-unavailable'],
    ['ENOTFOUND', 502, 'upstream-unavailable'],
    ['UND_ERR_SOCKET', 502, 'upstream-unavailable'],
    ['UND_ERR_CONNECT_TIMEOUT', 502, 'upstream-unavailable'],
    ['UND_ERR_HEADERS_TIMEOUT', 504, 'upstream-timeout'],
    ['UND_ERR_BODY_TIMEOUT', 504, 'upstream-timeout'],
    ['EOPENBREAKER', 502, 'upstream-unavailable'],
  ])('%s → %i %s', (code, status, problem) => {
    const p = upstreamProblem(err('WRAPPER', err(code)), 'orders', 7);
    expect(p.status).toBe(status);
    expect(p.code).toBe(problem);
    expect(p.extra.upstream).toBe('orders');
  });

  it('an open circuit carries Retry-After', () => {
    expect(upstreamProblem(err('EOPENBREAKER'), 'orders', 7).headers).toEqual({ 'retry-after': '7' });
  });

  it('only upstream-side failures count against the circuit', () => {
    expect(isUpstreamFailure(err('ECONNREFUSED'))).toBe(true);
    expect(isUpstreamFailure(err('UND_ERR_REQ_CONTENT_LENGTH_MISMATCH'))).toBe(false);
    expect(isUpstreamFailure(new Error('no code'))).toBe(false);
  });
});
