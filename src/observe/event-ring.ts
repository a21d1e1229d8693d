/**
 * Where the event log keeps its recent events: a ring of `capacity` events, each kept as
 * its time and its "body" (every other field), in one flat array made once. A stale flood
 * records an event per refused write (tens of thousands a second) that differ from the
 * last one of their lock in the time alone: they share one body, so an event costs two
 * array slots and no allocation of its own. Kept as an object per event, each lived long
 * enough to be copied by the young-generation collector and promoted; kept as its 13
 * fields, writing them cost a refusal about 1 µs (docs/adr/0013-stale-write-cache.md,
 * addenda 3 and 5). Events are made into objects when read.
 */
import type { Attribution, EventInput, FenceEvent } from './event-types.js';

/** What the log adds to an event after the refusal: its owner, its attribution (owners.ts) and when its lease ended. */
export interface Extra {
  owner: string | null;
  attribution: Attribution | null;
  leaseEndedAt: string | null;
}

/** Every field of an event but its id and time; never changed once made (events share it). */
type Body = Readonly<Omit<FenceEvent, 'id' | 'time' | 'behind' | 'holder' | 'leaseEndedAt'> & Extra>;

/** Locks whose last body is kept for the next event to share. */
const BODIES_KEPT = 1024;

export class EventRing {
  /** Slot k: cells[2k] the time, cells[2k + 1] the body. */
  private readonly cells: (string | Body | null)[];
  /** The last body per lock (insertion order: the first is dropped when full). */
  private readonly bodies = new Map<string, Body>();
  /** The slot of the oldest event once the ring is full. */
  private start = 0;
  /** Events kept (≤ capacity). */
  size = 0;
  /** The id of the newest event kept (ids grow by one per event pushed). */
  private lastId = 0;

  constructor(readonly capacity: number) {
    // Filled, not holey: one elements kind for every value an event holds.
    this.cells = new Array<string | Body | null>(capacity * 2).fill(null);
  }

  /** Keeps `input` with `owner` as event `id` (one more than the last), the oldest going when full. */
  push(id: number, input: EventInput, extra: Extra): void {
    let slot: number;
    if (this.size < this.capacity) {
      slot = (this.start + this.size) % this.capacity;
      this.size += 1;
    } else {
      slot = this.start;
      this.start = (this.start + 1) % this.capacity;
    }
    this.lastId = id;
    this.cells[slot * 2] = input.time;
    this.cells[slot * 2 + 1] = this.bodyOf(input, extra);
  }

  /** The id of event `i` (0: the oldest kept). */
  idAt(i: number): number {
    return this.lastId - this.size + 1 + i;
  }

  /** Event `i` (0: the oldest kept), as a new object. */
  at(i: number): FenceEvent {
    const k = ((this.start + i) % this.capacity) * 2;
    const body = this.cells[k + 1] as Body;
    return fenceEvent(this.idAt(i), this.cells[k] as string, body, body);
  }

  /** The body of `input`: its lock's last one when every field matches, else a new one. */
  private bodyOf(input: EventInput, extra: Extra): Body {
    const last = this.bodies.get(input.lock);
    if (
      last !== undefined &&
      last.type === input.type &&
      last.reason === input.reason &&
      last.route === input.route &&
      last.token === input.token &&
      last.highest === input.highest &&
      last.enforced === input.enforced &&
      last.client === input.client &&
      last.owner === extra.owner &&
      last.attribution === extra.attribution &&
      last.leaseEndedAt === extra.leaseEndedAt &&
      last.method === input.method &&
      last.path === input.path &&
      last.worker === input.worker &&
      last.heldKey === input.heldKey
    ) {
      return last;
    }
    const body: Body = {
      type: input.type,
      reason: input.reason,
      route: input.route,
      lock: input.lock,
      token: input.token,
      highest: input.highest,
      enforced: input.enforced,
      client: input.client,
      owner: extra.owner,
      attribution: extra.attribution,
      leaseEndedAt: extra.leaseEndedAt,
      method: input.method,
      path: input.path,
      worker: input.worker,
      heldKey: input.heldKey,
    };
    if (last !== undefined) this.bodies.delete(input.lock);
    else if (this.bodies.size >= BODIES_KEPT) {
      const oldest = this.bodies.keys().next();
      if (oldest.done !== true) this.bodies.delete(oldest.value);
    }
    this.bodies.set(input.lock, body);
    return body;
  }
}

/** An event as its readers get it, made of `fields` and `extra`: a new object, optional fields only when set. */
export function fenceEvent(
  id: number,
  time: string,
  fields: Omit<FenceEvent, 'id' | 'time' | 'owner' | 'behind' | 'holder' | 'leaseEndedAt'>,
  extra: Extra,
): FenceEvent {
  const event: FenceEvent = {
    id,
    time,
    type: fields.type,
    reason: fields.reason,
    route: fields.route,
    lock: fields.lock,
    token: fields.token,
    highest: fields.highest,
    enforced: fields.enforced,
    client: fields.client,
    owner: extra.owner,
    method: fields.method,
    path: fields.path,
  };
  if (fields.worker !== undefined) event.worker = fields.worker;
  if (fields.heldKey !== undefined) event.heldKey = fields.heldKey;
  const a = extra.attribution;
  if (a?.behind) event.behind = { grants: a.behind.grants, exact: a.behind.exact };
  if (a?.holder) event.holder = { owner: a.holder.owner, token: a.holder.token };
  if (extra.leaseEndedAt !== null) event.leaseEndedAt = extra.leaseEndedAt;
  return event;
}
