/**
 * The event log: what the fence refused and what went wrong with leases, kept in a
 * bounded in-memory ring (the recent log), streamed to subscribers (GET
 * /v1/events/stream, the dashboard's live feed), and logged at a bounded rate.
 * docs/events.md is the user-facing description.
 *
 * Ids grow by one per event recorded in this process (they restart with it), so an SSE
 * client resumes with Last-Event-ID and a gap shows as a jump. The owner of a refused
 * token is looked up after the decision (`owners`), never on the admission path: such an
 * event is recorded (and gets its id) when the lookup answers, or fails, or times out.
 */
import { EventRing, fenceEvent, type Extra } from './event-ring.js';
import type { Attribution, EventInput, EventReason, EventType, FenceEvent } from './event-types.js';
import type { LeaseEnds } from './lease-ends.js';

export {
  ALL_REASONS,
  EVENT_REASONS,
  EVENT_TYPES,
  type Attribution,
  type EventInput,
  type EventReason,
  type EventType,
  type FenceEvent,
} from './event-types.js';

/** What is known of a token: its owner alone, or its attribution (owners.ts). */
export type Looked = string | Attribution | null;

/**
 * The owner (or the attribution) of a token at once when it is known (or known to be
 * unknown for now), else a promise of it. `highest`: the event's highest admitted token.
 */
export type OwnerLookupFn = (lock: string, token: string, highest: string | null) => Looked | Promise<Looked>;

export interface EventLogOptions {
  /** Events kept for GET /v1/events and SSE resumption. Default 10,000. */
  capacity?: number;
  /** At most this many log lines per second; the rest are counted and summarised. */
  logPerSecond?: number;
  log?: (event: FenceEvent | { suppressed: number }) => void;
  /** Names the owner of a refused token (off the admission path; see owners.ts). */
  owners?: OwnerLookupFn;
  /** Events waiting for an owner lookup at most; past it they are recorded with owner null. */
  maxAwaitingOwner?: number;
  /** When leases ended (the issuer's): an event's `leaseEndedAt`. */
  leaseEnds?: LeaseEnds;
}

export interface EventFilter {
  route?: string;
  lock?: string;
  types?: readonly EventType[];
  reasons?: readonly EventReason[];
  /** Only events with a larger id. */
  afterId?: number;
  /** Only events decided at or after this time (ms since the epoch). */
  fromTime?: number;
  /** Only events of the locks this accepts (the principal's `events` prefixes, src/auth). */
  lockVisible?: (lock: string) => boolean;
}

export function matches(e: FenceEvent, f: EventFilter): boolean {
  if (f.route !== undefined && e.route !== f.route) return false;
  if (f.lock !== undefined && e.lock !== f.lock) return false;
  if (f.types !== undefined && !f.types.includes(e.type)) return false;
  if (f.reasons !== undefined && !f.reasons.includes(e.reason)) return false;
  if (f.afterId !== undefined && e.id <= f.afterId) return false;
  if (f.fromTime !== undefined && Date.parse(e.time) < f.fromTime) return false;
  if (f.lockVisible !== undefined && !f.lockVisible(e.lock)) return false;
  return true;
}

/** An event waiting for its owner lookup, or behind one that is. */
interface Waiting {
  input: EventInput;
  owner: Looked;
  /** The owner is known (or will not be): it may be appended once those before it are. */
  settled: boolean;
}

export class EventLog {
  /** The recent events (event-ring.ts: kept as fields, made into objects when read). */
  private readonly ring: EventRing;
  private readonly listeners = new Set<(e: FenceEvent) => void>();
  private readonly logPerSecond: number;
  private readonly log: EventLogOptions['log'];
  private readonly owners: OwnerLookupFn | undefined;
  private readonly maxAwaitingOwner: number;
  /** When leases ended (the issuer of this process feeds it); null: not known. */
  readonly leaseEnds: LeaseEnds | null;
  /** Events behind a pending owner lookup, oldest first. */
  private readonly waiting: Waiting[] = [];
  private windowStart = 0;
  private windowCount = 0;
  private suppressed = 0;
  /** Events recorded since start (= the last id given). */
  total = 0;

  constructor(options: EventLogOptions = {}) {
    this.ring = new EventRing(Math.max(1, options.capacity ?? 10_000));
    this.logPerSecond = options.logPerSecond ?? 10;
    this.log = options.log;
    this.owners = options.owners;
    this.maxAwaitingOwner = options.maxAwaitingOwner ?? 10_000;
    this.leaseEnds = options.leaseEnds ?? null;
  }

  /**
   * Records an event. With an owner lookup, an event with a token and no owner is recorded
   * with the owner the lookup already knows, else once the lookup settles (the lookup bounds
   * its own time); otherwise at once. Events are appended in the order they were recorded:
   * one that arrives while an earlier one waits for its owner waits behind it (ids and the
   * live stream follow the order of the refusals, not of the lookups).
   */
  record(input: EventInput): void {
    const lookup = this.owners;
    const found =
      lookup !== undefined && input.owner === null && input.token !== null && input.lock !== ''
        ? lookup(input.lock, input.token, input.highest)
        : null;
    if (!(found instanceof Promise)) {
      // Known already (a flood of refusals mostly repeats tokens): no promise per event.
      if (this.waiting.length === 0) this.appendOwned(input, found);
      else this.queue({ input, owner: found, settled: true });
      return;
    }
    const entry: Waiting = { input, owner: null, settled: false };
    this.queue(entry);
    found
      .catch(() => null)
      .then((owner) => {
        if (entry.settled) return; // recorded without it (the queue was full)
        entry.owner = owner;
        entry.settled = true;
        this.drain();
      });
  }

  private queue(entry: Waiting): void {
    this.waiting.push(entry);
    // Past the bound, the waiting events are recorded now, in order, without the owners
    // still unknown: a slow lookup must not hold the log back without limit.
    if (this.waiting.length > this.maxAwaitingOwner) {
      for (const w of this.waiting) w.settled = true;
    }
    this.drain();
  }

  private drain(): void {
    const w = this.waiting;
    let n = 0;
    while (n < w.length && w[n]!.settled) {
      this.appendOwned(w[n]!.input, w[n]!.owner);
      n++;
    }
    if (n > 0) w.splice(0, n);
  }

  private appendOwned(input: EventInput, looked: Looked): void {
    const attribution = typeof looked === 'string' || looked === null ? null : looked;
    const owner = typeof looked === 'string' ? looked : (attribution?.owner ?? null);
    const ended = input.token === null ? null : (this.leaseEnds?.endedIso(input.lock, input.token) ?? null);
    this.append(input, { owner: owner ?? input.owner, attribution, leaseEndedAt: ended });
  }

  /** Most recent first, at most `limit`, matching `filter`. */
  recent(limit = 100, filter: EventFilter = {}): FenceEvent[] {
    const out: FenceEvent[] = [];
    const ring = this.ring;
    for (let i = ring.size - 1; i >= 0 && out.length < limit; i--) {
      if (filter.afterId !== undefined && ring.idAt(i) <= filter.afterId) break; // ids only go down from here
      const e = ring.at(i);
      if (matches(e, filter)) out.push(e);
    }
    return out;
  }

  /** Oldest first: the retained events with an id above `afterId` that match `filter`. */
  after(afterId: number, filter: EventFilter = {}): FenceEvent[] {
    const out: FenceEvent[] = [];
    const ring = this.ring;
    if (ring.size === 0) return out;
    for (let i = Math.max(0, afterId + 1 - ring.idAt(0)); i < ring.size; i++) {
      const e = ring.at(i);
      if (matches(e, filter)) out.push(e);
    }
    return out;
  }

  /** Id of the oldest event still in the ring, or null when it is empty. */
  get oldestId(): number | null {
    return this.ring.size === 0 ? null : this.ring.idAt(0);
  }

  /** Events in the ring (≤ capacity). */
  get retained(): number {
    return this.ring.size;
  }

  get subscribers(): number {
    return this.listeners.size;
  }

  subscribe(listener: (e: FenceEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Appends the event; as an object only for subscribers and the log (a flood's events are neither). */
  private append(input: EventInput, extra: Extra): void {
    const id = (this.total += 1);
    this.ring.push(id, input, extra);
    const logged = this.log !== undefined && this.logSlot();
    if (this.listeners.size === 0 && !logged) return;
    const event = fenceEvent(id, input.time, input, extra);
    for (const l of this.listeners) l(event);
    if (logged) this.log?.(event);
  }

  /**
   * Whether this event may be logged: at most `logPerSecond` a second; the rest are
   * counted, and the count is logged when the next second's first event comes.
   */
  private logSlot(): boolean {
    const now = Date.now();
    if (now - this.windowStart >= 1000) {
      if (this.suppressed > 0) this.log?.({ suppressed: this.suppressed });
      this.windowStart = now;
      this.windowCount = 0;
      this.suppressed = 0;
    }
    if (this.windowCount < this.logPerSecond) {
      this.windowCount += 1;
      return true;
    }
    this.suppressed += 1;
    return false;
  }
}
