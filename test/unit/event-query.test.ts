import { describe, expect, it } from 'vitest';
import { ProblemError } from '../../src/errors.js';
import { encodeCursor, parseEventQuery, parseLocksQuery } from '../../src/observe/event-query.js';

function refusal(fn: () => unknown): { code: string; parameter: unknown } {
  try {
    fn();
  } catch (err) {
    if (err instanceof ProblemError) return { code: err.code, parameter: err.extra.parameter };
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('event query parameters', () => {
  it('parses every filter', () => {
    expect(
      parseEventQuery(
        {
          route: 'r',
          lock: 'order:1',
          type: 'fenced-write,drain-timeout',
          reason: 'stale',
          since: '7',
          limit: '5',
        },
        { stream: false },
      ),
    ).toEqual({
      filter: {
        route: 'r',
        lock: 'order:1',
        types: ['fenced-write', 'drain-timeout'],
        reasons: ['stale'],
        afterId: 7,
      },
      limit: 5,
    });
    expect(parseEventQuery({ since: '2026-12-01T12:00:00Z' }, { stream: true }).filter).toEqual({
      fromTime: Date.parse('2026-12-01T12:00:00Z'),
    });
    expect(parseEventQuery({}, { stream: false })).toEqual({ filter: {}, limit: 200 });
  });

  it.each([
    [{ reason: 'bogus' }, 'reason'],
    [{ reason: 'stale,' }, 'reason'],
    [{ type: 'fenced' }, 'type'],
    [{ since: 'yesterday' }, 'since'],
    [{ since: '2026-12-01' }, 'since'],
    [{ since: '2026-13-01T00:00:00Z' }, 'since'],
    [{ since: '-1' }, 'since'],
    [{ limit: '0' }, 'limit'],
    [{ limit: '10001' }, 'limit'],
    [{ limit: '1.5' }, 'limit'],
    [{ limit: '007' }, 'limit'],
    [{ route: '' }, 'route'],
    [{ lock: 'a\u0000b' }, 'lock'],
    [{ lock: 'x'.repeat(1025) }, 'lock'],
    [{ route: ['a', 'b'] }, 'route'],
    [{ owner: 'alice' }, 'owner'],
  ])('refuses %j with invalid-query naming %s', (query, parameter) => {
    expect(refusal(() => parseEventQuery(query, { stream: false }))).toEqual({
      code: 'invalid-query',
      parameter,
    });
  });

  it('the stream takes no limit', () => {
    expect(refusal(() => parseEventQuery({ limit: '5' }, { stream: true }))).toEqual({
      code: 'invalid-query',
      parameter: 'limit',
    });
  });
});

describe('lock list parameters', () => {
  it('parses prefix, limit and a cursor it made', () => {
    expect(parseLocksQuery({})).toEqual({ prefix: '', limit: 100, after: null });
    expect(parseLocksQuery({ prefix: 'order:', limit: '3', cursor: encodeCursor('order:{7}/é') })).toEqual({
      prefix: 'order:',
      limit: 3,
      after: 'order:{7}/é',
    });
  });

  it.each([
    [{ cursor: 'not a cursor' }, 'cursor'],
    [{ cursor: '' }, 'cursor'],
    [{ cursor: 'AAA=' }, 'cursor'],
    [{ limit: '1001' }, 'limit'],
    [{ prefix: '\u0007' }, 'prefix'],
    [{ key: 'x' }, 'key'],
  ])('refuses %j naming %s', (query, parameter) => {
    expect(refusal(() => parseLocksQuery(query))).toEqual({ code: 'invalid-query', parameter });
  });
});
