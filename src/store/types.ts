/**
 * The one interface every backend (embedded, Postgres, Redis, etcd) implements for locks
 * and fences. Expected outcomes (held, lost, stale…) are results, never exceptions;
 * a method throws only when the backend itself fails, and then it throws
 * StoreUnavailableError (src/errors.ts).
 *
 * Times are milliseconds since the Unix epoch *on the store's clock* (Redis TIME,
 * Postgres clock_timestamp()); callers never compare them with their own clock,
 * only use differences (e.g. retryAfterMs) as hints.
 */
import type { FencingToken } from '../tokens.js';

export interface Lease {
  key: string;
  owner: string;
  leaseId: string;
  token: FencingToken;
  /** Store-clock ms when the lease lapses unless renewed. */
  expiresAt: number;
  ttlMs: number;
}

export interface AcquireRequest {
  key: string;
  owner: string;
  ttlMs: number;
  /**
   * Idempotency id. A retry with the same (key, requestId, owner) returns the lease
   * first granted for it (with `replayed: true`) while that lease is still the current,
   * live lease; once it ended, the retry is answered `replay-ended`. It never grants
   * twice. Records are kept for at least max(ttlMs, 10 min).
   */
  requestId?: string;
  /**
   * Set when this attempt comes from a queued waiter (see enqueueWaiter). An attempt
   * only succeeds if the lock is free AND (no live waiter is queued, or this waiter is
   * the head of the queue). An attempt without waiterId never jumps a non-empty queue.
   * On success the waiter entry is removed in the same atomic step.
   */
  waiterId?: string;
  /**
   * The lease id to grant under; a fresh random id when absent. The issuer's multi-lock
   * acquire (Issuer.acquireMany) names one id for every key it takes, so that one lease id
   * renews and releases each of them. Only the grant uses it: a replay answers the lease id
   * first granted. Callers pass an unguessable id (a random UUID).
   */
  leaseId?: string;
}

export type AcquireResult =
  | {
      ok: true;
      lease: Lease;
      /** True when this is the replay of an earlier grant with the same requestId. */
      replayed: boolean;
      /** True when the grant replaced a lease that lapsed without being released. */
      tookOverExpired: boolean;
      /**
       * The lapsed lease this grant took over (its owner and token), when tookOverExpired;
       * null otherwise (and for a replay).
       */
      lapsed: { owner: string; token: FencingToken } | null;
    }
  | {
      ok: false;
      reason: 'held';
      /**
       * What blocks this attempt: 'lease' while a live lease holds the lock; 'queue'
       * when the lock is free but live waiters are queued ahead of this attempt.
       */
      blockedBy: 'lease' | 'queue';
      /**
       * Earliest time (ms from now) at which the state may change without a
       * notification: the current lease's expiry, or the deadline of a queued waiter
       * ahead of us (waiters of a live issuer carry short, renewed deadlines). Always ≥ 1.
       */
      retryAfterMs: number;
    }
  | {
      ok: false;
      /**
       * The requestId was granted a lease before, and that lease is no longer current
       * (it expired, was released, or another lease replaced it). Nothing was granted:
       * a replay never hands out a dead lease as if it were live.
       */
      reason: 'replay-ended';
      leaseId: string;
      token: FencingToken;
    }
  | {
      ok: false;
      /** The key's last token was 2^63−1: no token can ever be minted for it again. Nothing changed. */
      reason: 'exhausted';
    };

export type RenewResult = { ok: true; lease: Lease } | { ok: false; reason: 'lease-lost' };

export type ReleaseResult = { ok: true } | { ok: false; reason: 'not-owner' };

export interface LockState {
  key: string;
  /** True while a lease is live (not expired by the store's clock). */
  held: boolean;
  owner: string | null;
  leaseId: string | null;
  /** Token of the live lease, or the last token issued when no lease is live. */
  token: FencingToken;
  /** Highest token ever issued for this key (= token when held). */
  issued: FencingToken;
  expiresAt: number | null;
  /** Live queued waiters. */
  waiters: number;
  /** Highest token the gateway admitted for this key, if any. */
  highest: FencingToken | null;
  /**
   * Highest token shadow-mode routes (`enforce: false`) admitted for this key, if any: the
   * shadow record, apart from the enforced fence (AdmitRequest.record).
   */
  shadowHighest: FencingToken | null;
}

/** How many grants per key recentGrants() remembers (each store keeps at most this many). */
export const GRANT_HISTORY = 16;

/** Idempotency records (requestId replays) are kept at least this long, and at least the lease's ttl. */
export const MIN_REPLAY_MS = 10 * 60 * 1000;

export interface GrantRecord {
  token: FencingToken;
  owner: string;
}

export interface ListLocksQuery {
  /** At most this many locks (1 … 1000). */
  limit: number;
  /** Only keys that start with this string ('' = all). */
  prefix: string;
  /** Only keys after this one (byte order): the last key of the previous page; null = from the start. */
  after: string | null;
}

export interface LockPage {
  locks: LockState[];
  /** The key to pass as `after` for the next page; null when this page is the last. */
  next: string | null;
  /** The store clock when the page was read (ms), to turn expiresAt into time remaining. */
  now: number;
}

/** What the store checks at admission: the token alone, or also that its lease is live. */
export type AdmitCheck = 'token' | 'lease';
/**
 * A route's `fencing.check`. `sequencer` is verified by the gateway (signature, lock,
 * expiry: src/sequencer/) and then admitted as `token`; stores never see it.
 */
export type FenceCheck = AdmitCheck | 'sequencer';

export interface AdmitRequest {
  lock: string;
  token: FencingToken;
  check: AdmitCheck;
  /** Unique id of this in-flight write; used to finish() it. */
  requestId: string;
  /**
   * The gateway session (openSession) the in-flight entry belongs to. The entry counts
   * until it is finished or until that session ends: it has no deadline of its own, so
   * no clock decides when it stops counting (see docs/adr/0005-gateway-sessions.md).
   */
  session: string;
  /**
   * What the admission records:
   * - true (an enforced route fenced in the gateway): the compare-and-set of the fence
   *   and the write's in-flight entry;
   * - 'shadow' (a shadow-mode route, `enforce: false`): judged exactly as an enforced
   *   admission, and when it admits it raises the lock's shadow record (the highest token
   *   shadow routes admitted) alone: no fence moves, no in-flight entry;
   * - false (a kind that fences inside the resource): the verdict only, nothing written.
   *
   * Every admission judges against the higher of the fence and the shadow record: both
   * name tokens whose writes reached the upstream. So a shadow route sees the takeover an
   * enforced route on the same lock admitted, and a route switched from shadow to
   * enforced starts from what the shadow period saw.
   */
  record: boolean | 'shadow';
  /**
   * For a recorded admission (record true): how long the upstream may take to apply the
   * write once it received it (the route's upstream bound, ms). The entry carries it when
   * the write leaves at once (`lowerInflight` 0 in the answer); then, should the gateway's
   * session end, the entry keeps counting for this bound (a lock-delay) after an observer
   * saw the session gone, because the write may already be at the upstream. 0, or a write
   * that must first wait at the drain barrier, records 0: the gateway calls `deliver`
   * before it sends the write. Default 0.
   */
  deliveryBoundMs?: number;
}

export type AdmitResult =
  | {
      ok: true;
      /** Highest admitted token after this admission. */
      highest: FencingToken;
      /** Live in-flight entries for this lock with a token lower than ours (drain barrier). */
      lowerInflight: number;
    }
  | {
      ok: false;
      /**
       * stale: token < highest admitted, or below the current epoch's floor;
       * forged: token never issued for this lock (greater than the highest issued, or nothing issued);
       * lease-expired: check 'lease' and the token's lease is not live now.
       */
      reason: 'stale' | 'forged' | 'lease-expired';
      highest: FencingToken | null;
    };

export interface InflightState {
  /** In-flight entries with a token lower than the one asked about. */
  count: number;
  /** The gateway sessions those entries belong to (distinct). */
  sessions: string[];
  /**
   * Per session (same order as `sessions`): the largest delivery bound (ms) among its
   * entries counted here, 0 when none of them was delivering. Whether a session still
   * lives is for the caller to judge: a store may list the entries of an ended session
   * until `dropInflight` removes them (Redis does), or leave out those it removed when the
   * session ended (the SQL and embedded stores keep only the delivering ones).
   */
  bounds: number[];
}

/**
 * An attempt to begin a request under an idempotency key (Store.beginIdempotent): the
 * gateway's `Idempotency-Key` replays (docs/gateway.md, "Idempotency").
 */
export interface IdempotentBegin {
  /**
   * The record's key, composed by the caller (the gateway: the route's name and the client's
   * key). Opaque to the store: any non-empty string of at most IDEMPOTENCY_KEY_MAX bytes of
   * UTF-8; two different strings are two different records.
   */
  key: string;
  /** What a retry must repeat to be the same request: a digest, opaque to the store (compared for equality). */
  fingerprint: string;
  /** Unique id of this attempt: finishIdempotent and abandonIdempotent name it. */
  attempt: string;
  /**
   * How long (ms, on the store's clock, ≥ 1) this attempt holds the key in flight: once it
   * passed, the record counts as abandoned (a gateway that crashed mid-request never
   * finishes it), and the next begin takes the key over.
   */
  holdMs: number;
}

export type IdempotentBeginResult =
  /** No live record had the key: this attempt holds it now, in flight. Forward, then finish or abandon. */
  | { state: 'begun' }
  /** An attempt with the same fingerprint holds the key in flight; its hold ends in `retryAfterMs` (≥ 1). */
  | { state: 'in-flight'; retryAfterMs: number }
  /** A live record (in flight or done) has another fingerprint. Nothing changed. */
  | { state: 'mismatch' }
  /** A finished attempt with the same fingerprint stored this response (the bytes finishIdempotent got). */
  | { state: 'done'; response: Uint8Array };

/** The answer of a begun attempt, to keep (Store.finishIdempotent). */
export interface IdempotentFinish {
  key: string;
  attempt: string;
  /** Kept as given, byte for byte. */
  response: Uint8Array;
  /** How long (ms, store clock, ≥ 1) the record stays done from now. */
  ttlMs: number;
}

/** Longest record key (UTF-8 bytes) a store must take in IdempotentBegin.key. */
export const IDEMPOTENCY_KEY_MAX = 512;

/** A gateway session as stored: its heartbeat counter and the TTL its owner promised. */
export interface SessionRecord {
  /** Incremented by every heartbeat; observers judge liveness by watching it change. */
  beat: number;
  /**
   * How long (on any observer's monotonic clock) the beat may stay unchanged before the
   * session may be ended by someone else. Its owner stops forwarding well before.
   */
  ttlMs: number;
}

export interface BeatResult {
  /** False when the session no longer exists (ended by an observer, or never opened). */
  alive: boolean;
  /** Store clock at the beat, ms: only for detecting store clock jumps, never for safety. */
  now: number;
}

/**
 * The store's state may have been lost or replaced under this process (docs/adr/
 * 0019-store-identity.md): a new epoch was started or found (its record was recreated,
 * bumped by an operator or by the identity check), or the store behind the connection is
 * not the one this process knew. Tokens at or below `floor` are refused from now on.
 */
export interface StoreReset {
  /** What was seen, for logs and events. */
  reason: string;
  /** The global floor after the reset. */
  floor: FencingToken;
}

export interface StoreHealth {
  ok: boolean;
  kind: StoreKind;
  detail: string;
  epoch: { id: string; floor: FencingToken } | null;
}

export type StoreKind = 'embedded' | 'postgres' | 'redis' | 'etcd';

export interface Store {
  readonly kind: StoreKind;

  // ---- locks (issuer) ----
  tryAcquire(req: AcquireRequest): Promise<AcquireResult>;
  renew(key: string, leaseId: string, ttlMs: number): Promise<RenewResult>;
  release(key: string, leaseId: string): Promise<ReleaseResult>;
  /**
   * null when no token was ever issued for the key (in the current epoch), or, on the
   * embedded store, none since its idle record was retired (src/store/lmdb/retire.ts).
   */
  inspect(key: string): Promise<LockState | null>;
  /**
   * Appends a waiter to the key's FIFO queue; it stops counting at now + waitMs (store
   * clock). Calling it again for a live waiter keeps its place and sets the new deadline
   * (the issuer renews short deadlines this way while its waiter is alive).
   */
  enqueueWaiter(key: string, waiterId: string, waitMs: number): Promise<void>;
  /** Removes a waiter (gave up or timed out) and notifies watchers. */
  removeWaiter(key: string, waiterId: string): Promise<void>;
  /**
   * Keys with a live lease or live queued waiters, in byte order of the key, one page at
   * a time (GET /v1/locks and the dashboard's lock table).
   */
  listLocks(query: ListLocksQuery): Promise<LockPage>;
  /**
   * Who was granted which token of `key`: the last GRANT_HISTORY grants, newest first
   * (the current lease included). Older grants are forgotten; so is the owner of a token
   * whose key's state was lost. Used to name the owner of a refused token in events.
   */
  recentGrants(key: string): Promise<GrantRecord[]>;

  // ---- fences (gateway) ----
  admit(req: AdmitRequest): Promise<AdmitResult>;
  /** Removes an in-flight entry (upstream answered or request aborted) and notifies watchers. */
  finish(lock: string, requestId: string): Promise<void>;
  /**
   * Marks an in-flight entry as delivering with `boundMs` (see AdmitRequest.deliveryBoundMs),
   * before its write is sent. False when the entry no longer exists (finished, or its
   * session ended and its entries were dropped): the write must not be sent.
   */
  deliver(lock: string, requestId: string, boundMs: number): Promise<boolean>;
  lowerInflight(lock: string, token: FencingToken): Promise<InflightState>;
  /**
   * Removes the lock's in-flight entries that belong to `sessions` (ended) and whose
   * delivery bound is at most `maxBoundMs` (0: only those that were not delivering), and
   * notifies watchers. A delivering entry is dropped only by a gateway that watched its
   * session gone for the lock-delay of that bound.
   */
  dropInflight(lock: string, sessions: readonly string[], maxBoundMs: number): Promise<void>;

  // ---- idempotency records (gateway Idempotency-Key replays; docs/gateway.md) ----
  /**
   * One record per key, judged and written in one atomic step on the store's clock. A record
   * is live while it is in flight and its hold has not passed, or done and its ttl has not
   * passed; a record that is not live is as good as absent (the store deletes it when it
   * likes). begin, in order:
   * - no live record: records `{fingerprint, attempt, in flight until now + holdMs}` → 'begun';
   * - a live record with another fingerprint → 'mismatch' (in flight or done alike);
   * - in flight → 'in-flight' with the time left of its hold;
   * - done → 'done' with its response.
   * Only 'begun' writes. Across processes: two begins of one key never both get 'begun'
   * while the first attempt's record is live.
   */
  beginIdempotent(req: IdempotentBegin): Promise<IdempotentBeginResult>;
  /**
   * Stores `response` (bytes kept as given) for the attempt and keeps the record done for
   * `ttlMs` (≥ 1) from now, store clock (the fingerprint stays the one begin recorded). Only while the record is still this attempt's and
   * in flight: true then. False when it is not (abandoned, or its hold passed and another
   * attempt took the key over, or the store removed it after its hold): nothing changed.
   */
  finishIdempotent(done: IdempotentFinish): Promise<boolean>;
  /**
   * Removes the record if it is this attempt's and in flight (the request was not done:
   * refused before it was forwarded, or its answer is not one to replay), so the next begin
   * is 'begun'. Anything else (another attempt's record, a done one, none) is left as it is.
   */
  abandonIdempotent(key: string, attempt: string): Promise<void>;

  // ---- gateway sessions (liveness of in-flight entries; docs/adr/0005) ----
  /** Registers a new gateway session with beat 0. */
  openSession(id: string, ttlMs: number): Promise<void>;
  /** Increments the session's beat if it still exists. */
  beatSession(id: string): Promise<BeatResult>;
  /** The records of `ids` that exist (all sessions when ids is null). */
  readSessions(ids: readonly string[] | null): Promise<Map<string, SessionRecord>>;
  /**
   * Ends a session if its beat still equals `ifBeat` (null: unconditionally, for the
   * owner's own clean shutdown). Ending removes it for good: a later beat finds nothing.
   * Its in-flight entries that were not delivering stop counting; delivering ones count
   * on until an observer drops them, their bound after it saw the session gone.
   * Returns true when this call ended it.
   */
  endSession(id: string, ifBeat: number | null): Promise<boolean>;

  // ---- notifications ----
  /**
   * Calls `listener` (with no arguments; possibly spuriously) whenever the key's state
   * may have changed for waiters: a release, a grant (so the waiters behind re-read the
   * new lease's expiry), a waiter leaving, an in-flight write finishing. Delivered across processes (Redis pub/sub, Postgres LISTEN/NOTIFY).
   * Resolves once the subscription is active; the returned function unsubscribes.
   */
  watch(key: string, listener: () => void): Promise<() => void>;

  // ---- epochs ----
  /**
   * Starts a new global epoch whose floor is the store clock in ms × 1000 (or higher,
   * never lower than the current floor). For use after restoring a backup: every token
   * minted afterwards is above the floor, and tokens at or below it are refused as stale;
   * leases whose token is at or below it can no longer be renewed.
   */
  bumpEpoch(): Promise<{ id: string; floor: FencingToken }>;
  /**
   * Calls `listener` whenever this process finds that the store's state may have been
   * lost or replaced since it last looked (StoreReset): another epoch than the one it
   * knew, or another store behind the connection. Not called for what it found when it
   * opened. The returned function unsubscribes.
   */
  onReset(listener: (reset: StoreReset) => void): () => void;

  // ---- lifecycle ----
  /** Store clock, ms since epoch. */
  now(): Promise<number>;
  health(): Promise<StoreHealth>;
  close(): Promise<void>;
}

export interface StoreOptions {
  /** Redis: key prefix (default "fg"). Postgres/embedded: schema name (default "fencegate"). */
  namespace?: string;
  /** Redis: start even without AOF appendfsync always. */
  allowVolatileRedis?: boolean;
  /** rediss://, etcds://: the CA certificates (PEM) the server's certificate must chain to (--store-ca). */
  tlsCa?: readonly string[];
  /** rediss://, etcds://: the client certificate chain and key presented (--store-cert, --store-key). */
  tlsClient?: { cert: string; key: string };
  /**
   * Refuse to open a store (a directory, a schema, a key prefix) that fencegate never
   * initialised, instead of creating it: for commands that act on an existing store
   * (`fencegate epoch bump`), where a typo must not create a new one and report success.
   */
  mustExist?: boolean;
  /**
   * Embedded store: how long a lock record stays after its last use before housekeeping
   * deletes it and raises the retired floor (src/store/lmdb/retire.ts). Default 15 minutes.
   */
  lockRetentionMs?: number;
}

/**
 * The delivery bound an admission records on its entry (AdmitRequest.deliveryBoundMs):
 * whole milliseconds ≥ 0, and 0 unless the admission records an entry.
 */
export function deliveryBound(req: AdmitRequest): number {
  const ms = req.deliveryBoundMs ?? 0;
  if (req.record !== true || !(ms > 0)) return 0;
  return Number.isFinite(ms) ? Math.ceil(ms) : 0;
}
