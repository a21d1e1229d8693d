/** Events for tests of the event log and its streams. */
import type { EventInput } from '../../src/observe/events.js';

/** A stale-write refusal numbered `i` (token i, highest i + 1), on `lock`, with a path of `pathBytes` x's. */
export function staleEvent(i: number, lock = `order:${i % 3}`, pathBytes = 16): EventInput {
  return {
    time: new Date().toISOString(),
    type: 'fenced-write',
    reason: 'stale',
    route: 'r',
    lock,
    token: String(i),
    highest: String(i + 1),
    enforced: true,
    client: '127.0.0.1',
    owner: null,
    method: 'PUT',
    path: `/orders/${'x'.repeat(pathBytes)}`,
  };
}
