/**
 * The issuer's inputs and answers (./service.ts runs them; ./many.ts composes the
 * multi-lock acquire from single ones).
 */
import type { FencingToken } from '../tokens.js';
import type { Lease } from '../store/types.js';

export interface AcquireInput {
  key: string;
  owner: string;
  ttlMs: number;
  waitMs: number;
  requestId?: string;
  /** Told of an ordering violation this acquire makes (the API records an event). */
  onOrderViolation?: (v: OrderViolation) => void;
}

export type IssuerAcquireResult =
  | {
      ok: true;
      lease: Lease;
      replayed: boolean;
      /**
       * Milliseconds (this process's monotonic clock) from when the request reached the
       * issuer until the store call that granted it was sent: the grant, and so the
       * lease's start, came no earlier. 0 for a replay (granted by an earlier request).
       */
      waitedMs: number;
      /** The lapsed lease this grant took over (never released by its owner), or null. */
      lapsed: { owner: string; token: FencingToken } | null;
    }
  | { ok: false; reason: 'held'; blockedBy: 'lease' | 'queue'; retryAfterMs: number }
  | { ok: false; reason: 'replay-ended'; leaseId: string; token: FencingToken }
  | { ok: false; reason: 'exhausted' }
  | OrderRefusal;

/** Refused as an ordering violation (lockOrder 'refuse'): the owner holds `heldKey`, after the key asked for. */
export interface OrderRefusal {
  ok: false;
  reason: 'lock-order';
  heldKey: string;
}

/** An ordering violation seen by an acquire (counted, and refused in 'refuse' mode). */
export interface OrderViolation {
  /** The lowest key asked for. */
  key: string;
  /** The key the owner holds that sorts after it. */
  heldKey: string;
  refused: boolean;
}

export interface AcquireManyInput {
  /** The keys, in any order, no two equal (the API validates them). */
  keys: readonly string[];
  owner: string;
  ttlMs: number;
  waitMs: number;
  requestId?: string;
  onOrderViolation?: (v: OrderViolation) => void;
}

/** A multi-lock grant: one lease id and TTL for every key, one lease (and token) per key. */
export interface ManyGrant {
  ok: true;
  owner: string;
  leaseId: string;
  ttlMs: number;
  /** In canonical order. */
  leases: Lease[];
  /** Store-clock ms: the earliest expiry of the leases. */
  expiresAt: number;
  /** True when every key was the replay of an earlier grant for this requestId. */
  replayed: boolean;
  /** The leases granted by this call (not replays). */
  issued: Lease[];
  /** As IssuerAcquireResult's: until the store call after which every lease lives ttlMs. */
  waitedMs: number;
  lapsed: { key: string; owner: string; token: FencingToken }[];
}

export type IssuerAcquireManyResult =
  | ManyGrant
  | OrderRefusal
  | (Exclude<IssuerAcquireResult, { ok: true } | OrderRefusal> & { key: string })
  /** A lease taken earlier in this acquire was lost while it waited for a later key. */
  | { ok: false; reason: 'lease-lost'; key: string };

/** A single-key acquire as the issuer runs it, alone or as one key of a multi-lock acquire. */
export interface QueueInput extends AcquireInput {
  /** performance.now() at which waiting ends. */
  deadline: number;
  /** The lease id to grant under (multi-lock acquire); absent: the store picks one. */
  leaseId?: string;
  /** Run every `everyMs` while it waits in the queue (a multi-lock acquire renews what it took). */
  tick?: { everyMs: number; run: () => Promise<void> };
}

/** One key's acquire: never an ordering refusal (judged once, before any key). */
export type AcquireAnswer = Exclude<IssuerAcquireResult, OrderRefusal>;
