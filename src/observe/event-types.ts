/**
 * What an event is: its types, the reasons each type can carry, and its fields
 * (docs/events.md). Apart from the event log (./events.ts), which re-exports them, so
 * that the ring buffer (./event-ring.ts) names them without importing the log.
 */
// The reasons of a `fenced-write` event are the verdict's, as the metric's: one list.
import { FENCED_REASONS } from '../gateway/reasons.js';

/** Each event type and the reasons it can carry (reasons are unique across types). */
export const EVENT_REASONS = {
  'fenced-write': FENCED_REASONS,
  'drain-timeout': ['drain-timeout'],
  'lock-delay': ['delivered-write', 'store-reset'],
  'lease-expired': ['expired'],
  'renew-failed': ['lease-lost'],
  'release-not-owner': ['not-owner'],
  'lock-order': ['order-counted', 'order-refused'],
} as const;

export type EventType = keyof typeof EVENT_REASONS;
export type EventReason = (typeof EVENT_REASONS)[EventType][number];
export const EVENT_TYPES = Object.keys(EVENT_REASONS) as EventType[];
export const ALL_REASONS = EVENT_TYPES.flatMap((t) => [...EVENT_REASONS[t]]) as EventReason[];

export interface FenceEvent {
  /** 1, 2, 3… in the order events were recorded by this process. */
  id: number;
  /** ISO time of the decision. */
  time: string;
  type: EventType;
  reason: EventReason;
  /** Policy route of a gateway event; null for the issuer's lease events. */
  route: string | null;
  lock: string;
  /** Presented token as a decimal string (for lease-expired: the lapsed lease's), or null. */
  token: string | null;
  /** Highest admitted token at decision time (lease-expired: the token that took over), or null. */
  highest: string | null;
  /** False in shadow mode: the write was forwarded anyway. Issuer events: true. */
  enforced: boolean;
  /** Client address, as fastify saw it (request.ip). */
  client: string;
  /** Who was granted `token`, when the store still remembers (docs/events.md), else null. */
  owner: string | null;
  method: string | null;
  path: string | null;
  /**
   * lock-order only: the key the owner held, which sorts after `lock` (the lowest key it
   * asked for) in the canonical order.
   */
  heldKey?: string;
  /** With serve --workers: the worker (1…N) whose gateway decided it; absent otherwise. */
  worker?: number;
  /**
   * How many grants of the lock came after `token`, from the store's record of its last 16
   * grants: exact when the record holds `token`, else (older than the record) at least
   * `grants`. Absent when not known (docs/events.md).
   */
  behind?: GrantsBehind;
  /** The lock's newest grant when the event was recorded (its owner and token); absent when not known. */
  holder?: GrantHolder;
  /** When the lease of `token` ended (released, lapsed or replaced), as this process's issuer saw it; absent when not known. */
  leaseEndedAt?: string;
}

export interface GrantsBehind {
  grants: number;
  exact: boolean;
}

export interface GrantHolder {
  owner: string;
  token: string;
}

/** What the event log learns of a refused token after the refusal (owners.ts): shared, never changed. */
export interface Attribution {
  owner: string | null;
  behind: GrantsBehind | null;
  holder: GrantHolder | null;
}

export type EventInput = Omit<FenceEvent, 'id' | 'behind' | 'holder' | 'leaseEndedAt'>;
