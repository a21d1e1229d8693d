/**
 * A refused write is counted and recorded as an event with its tokens as decimal
 * strings; a refusal value answered again (a stale flood's) records the same texts.
 */
import { describe, expect, it } from 'vitest';
import type { GatewayRequestState } from '../../src/gateway/context.js';
import type { Exchange } from '../../src/gateway/exchange.js';
import { refusalRecorder, type RefusedWrite } from '../../src/gateway/refusal-log.js';
import { EventLog } from '../../src/observe/events.js';
import { createMetrics } from '../../src/observe/metrics.js';

const ex = { ip: '10.0.0.7', method: 'PUT' } as Exchange;
const state = { match: { route: { name: 'orders' } }, path: '/orders/1' } as unknown as GatewayRequestState;

describe('refusalRecorder', () => {
  it('records each refusal with its tokens as text, the same texts when the refusal repeats', () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const events = new EventLog();
    const record = refusalRecorder(metrics, events);
    const stale: RefusedWrite = { reason: 'stale', lock: 'order:1', token: 41n, highest: 42n };
    record(ex, state, stale, true);
    record(ex, state, stale, true);
    record(
      ex,
      state,
      { reason: 'stale', lock: 'order:1', token: 9007199254740993n, highest: '9007199254740994' },
      false,
    );
    record(ex, state, { reason: 'missing', lock: 'order:1', token: null, highest: null }, true);
    const [missing, big, second, first] = events.recent(10);
    expect([first, second].map((e) => [e!.id, e!.token, e!.highest, e!.enforced])).toEqual([
      [1, '41', '42', true],
      [2, '41', '42', true],
    ]);
    expect([big!.token, big!.highest, big!.enforced]).toEqual([
      '9007199254740993',
      '9007199254740994',
      false,
    ]);
    expect([missing!.token, missing!.highest, missing!.reason]).toEqual([null, null, 'missing']);
    expect(first).toMatchObject({
      type: 'fenced-write',
      route: 'orders',
      client: '10.0.0.7',
      path: '/orders/1',
    });
    expect(metrics.fenceOf('orders').refused('stale', true).n).toBe(2);
  });
});
