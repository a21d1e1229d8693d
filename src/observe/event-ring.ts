/**
 * Where the event log keeps its recent events: a ring of `capacity` events stored as the
 * fields of each, in one flat array made once, not as an object per event. A stale flood
 * records an event per refused write (tens of thousands a second); each kept as an object
 * lived long enough to be copied by the young-generation collector and promoted, which
 * cost a refusal about 1 µs of collector time (docs/adr/0013-stale-write-cache.md,
 * addendum 3). Here an event costs no allocation of its own: its strings are mostly
 * shared (the lock, the tokens of a repeated refusal, the route, the client, the time
 * within a millisecond). Events are made into objects when read.
 */
import type { EventInput, FenceEvent } from './events.js';

/** The fields of one event, in slot order: `push` writes and `at` reads them in this order. */
const FIELDS = [
  'time',
  'type',
  'reason',
  'route',
  'lock',
  'token',
  'highest',
  'enforced',
  'client',
  'owner',
  'method',
  'path',
  'worker',
] as const;
const WIDTH = FIELDS.length;

export class EventRing {
  private readonly cells: unknown[];
  /** The slot of the oldest event once the ring is full. */
  private start = 0;
  /** Events kept (≤ capacity). */
  size = 0;
  /** The id of the newest event kept (ids grow by one per event pushed). */
  private lastId = 0;

  constructor(readonly capacity: number) {
    // Filled, not holey: one elements kind for every value an event holds.
    this.cells = new Array<unknown>(capacity * WIDTH).fill(null);
  }

  /** Keeps `input` with `owner` as event `id` (one more than the last), the oldest going when full. */
  push(id: number, input: EventInput, owner: string | null): void {
    let slot: number;
    if (this.size < this.capacity) {
      slot = (this.start + this.size) % this.capacity;
      this.size += 1;
    } else {
      slot = this.start;
      this.start = (this.start + 1) % this.capacity;
    }
    this.lastId = id;
    const c = this.cells;
    let i = slot * WIDTH;
    c[i++] = input.time;
    c[i++] = input.type;
    c[i++] = input.reason;
    c[i++] = input.route;
    c[i++] = input.lock;
    c[i++] = input.token;
    c[i++] = input.highest;
    c[i++] = input.enforced;
    c[i++] = input.client;
    c[i++] = owner;
    c[i++] = input.method;
    c[i++] = input.path;
    c[i] = input.worker;
  }

  /** The id of event `i` (0: the oldest kept). */
  idAt(i: number): number {
    return this.lastId - this.size + 1 + i;
  }

  /** Event `i` (0: the oldest kept), as a new object. */
  at(i: number): FenceEvent {
    const c = this.cells;
    let k = ((this.start + i) % this.capacity) * WIDTH;
    const event = {
      id: this.idAt(i),
      time: c[k++],
      type: c[k++],
      reason: c[k++],
      route: c[k++],
      lock: c[k++],
      token: c[k++],
      highest: c[k++],
      enforced: c[k++],
      client: c[k++],
      owner: c[k++],
      method: c[k++],
      path: c[k++],
    } as FenceEvent;
    const worker = c[k] as number | undefined;
    if (worker !== undefined) event.worker = worker;
    return event;
  }
}
