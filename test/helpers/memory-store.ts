/**
 * An in-memory Store for gateway tests that need no backend (and as a reference
 * for the contract's semantics). Single process only; the clock is Date.now().
 * Not a stand-in for the real stores: integration tests also run on Redis and
 * the embedded store.
 */
import { randomUUID } from 'node:crypto';
import { StoreUnavailableError } from '../../src/errors.js';
import { deliveryBound, GRANT_HISTORY } from '../../src/store/types.js';
import { ResetWatch } from '../../src/store/reset.js';
import type {
  AcquireRequest,
  AcquireResult,
  AdmitRequest,
  AdmitResult,
  BeatResult,
  GrantRecord,
  IdempotentBegin,
  IdempotentBeginResult,
  IdempotentFinish,
  InflightState,
  Lease,
  ListLocksQuery,
  LockPage,
  LockState,
  ReleaseResult,
  RenewResult,
  SessionRecord,
  Store,
  StoreHealth,
  StoreReset,
} from '../../src/store/types.js';

interface KeyState {
  issued: bigint;
  lease: Lease | null;
  waiters: { id: string; deadline: number }[];
  highest: bigint | null;
  shadowHighest: bigint | null;
  inflight: Map<string, { token: bigint; session: string; bound: number }>;
  grants: Map<string, { owner: string; lease: Lease }>;
  /** The last GRANT_HISTORY grants, newest first. */
  owners: GrantRecord[];
}

export class MemoryStore implements Store {
  readonly kind = 'embedded' as const;
  private readonly keys = new Map<string, KeyState>();
  private readonly listeners = new Map<string, Set<() => void>>();
  private readonly sessions = new Map<string, SessionRecord>();
  private readonly idempotency = new Map<
    string,
    { fingerprint: string; attempt: string | null; until: number; response: Uint8Array | null }
  >();
  private floor = 0n;
  private closed = false;
  private readonly resets = new ResetWatch();

  onReset(listener: (reset: StoreReset) => void): () => void {
    return this.resets.onReset(listener);
  }

  async tryAcquire(req: AcquireRequest): Promise<AcquireResult> {
    const s = this.state(req.key);
    const now = this.clock();
    if (req.requestId !== undefined) {
      const prior = s.grants.get(req.requestId);
      if (prior && prior.owner === req.owner) {
        const cur = s.lease;
        if (cur !== null && cur.leaseId === prior.lease.leaseId && cur.expiresAt > now)
          return { ok: true, lease: { ...cur }, replayed: true, tookOverExpired: false, lapsed: null };
        return { ok: false, reason: 'replay-ended', leaseId: prior.lease.leaseId, token: prior.lease.token };
      }
    }
    s.waiters = s.waiters.filter((w) => w.deadline > now);
    const live = s.lease !== null && s.lease.expiresAt > now;
    const head = s.waiters[0];
    const queueBlocks = head !== undefined && head.id !== req.waiterId;
    if (live || queueBlocks) {
      const until = live && s.lease ? s.lease.expiresAt - now : (head?.deadline ?? now + 1) - now;
      return {
        ok: false,
        reason: 'held',
        blockedBy: live ? 'lease' : 'queue',
        retryAfterMs: Math.max(1, until),
      };
    }
    const lapsed = s.lease === null ? null : { owner: s.lease.owner, token: s.lease.token };
    const tookOverExpired = lapsed !== null;
    s.issued = (s.issued > this.floor ? s.issued : this.floor) + 1n;
    const lease: Lease = {
      key: req.key,
      owner: req.owner,
      leaseId: req.leaseId ?? randomUUID(),
      token: s.issued,
      expiresAt: now + req.ttlMs,
      ttlMs: req.ttlMs,
    };
    s.lease = lease;
    if (req.waiterId !== undefined) s.waiters = s.waiters.filter((w) => w.id !== req.waiterId);
    if (req.requestId !== undefined) s.grants.set(req.requestId, { owner: req.owner, lease: { ...lease } });
    s.owners = [{ token: lease.token, owner: lease.owner }, ...s.owners].slice(0, GRANT_HISTORY);
    return { ok: true, lease: { ...lease }, replayed: false, tookOverExpired, lapsed };
  }

  async renew(key: string, leaseId: string, ttlMs: number): Promise<RenewResult> {
    const s = this.state(key);
    const now = this.clock();
    if (s.lease === null || s.lease.leaseId !== leaseId || s.lease.expiresAt <= now)
      return { ok: false, reason: 'lease-lost' };
    s.lease = { ...s.lease, expiresAt: now + ttlMs, ttlMs };
    return { ok: true, lease: { ...s.lease } };
  }

  async release(key: string, leaseId: string): Promise<ReleaseResult> {
    const s = this.state(key);
    if (s.lease === null || s.lease.leaseId !== leaseId || s.lease.expiresAt <= this.clock())
      return { ok: false, reason: 'not-owner' };
    s.lease = null;
    this.notify(key);
    return { ok: true };
  }

  async inspect(key: string): Promise<LockState | null> {
    this.clock();
    const s = this.keys.get(key);
    return s === undefined || s.issued === 0n ? null : this.describe(key, s);
  }

  async enqueueWaiter(key: string, waiterId: string, waitMs: number): Promise<void> {
    this.state(key).waiters.push({ id: waiterId, deadline: this.clock() + waitMs });
  }

  async removeWaiter(key: string, waiterId: string): Promise<void> {
    const s = this.state(key);
    s.waiters = s.waiters.filter((w) => w.id !== waiterId);
    this.notify(key);
  }

  async listLocks(query: ListLocksQuery): Promise<LockPage> {
    const now = this.clock();
    const found = [...this.keys.entries()]
      .filter(
        ([k, s]) =>
          k.startsWith(query.prefix) &&
          (query.after === null || Buffer.compare(Buffer.from(k), Buffer.from(query.after)) > 0) &&
          s.issued > 0n &&
          ((s.lease !== null && s.lease.expiresAt > now) || s.waiters.some((w) => w.deadline > now)),
      )
      .sort(([a], [b]) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
      .slice(0, query.limit + 1)
      .map(([k, s]) => this.describe(k, s));
    const locks = found.slice(0, query.limit);
    const next = found.length > query.limit ? (locks[locks.length - 1]?.key ?? null) : null;
    return { locks, next, now };
  }

  async recentGrants(key: string): Promise<GrantRecord[]> {
    return [...(this.keys.get(key)?.owners ?? [])];
  }

  async admit(req: AdmitRequest): Promise<AdmitResult> {
    const s = this.state(req.lock);
    const now = this.clock();
    // Judged against the higher of the fence and the shadow record (both reached the upstream).
    const highest = max(s.highest, s.shadowHighest);
    if (s.issued === 0n || req.token > s.issued) return { ok: false, reason: 'forged', highest };
    if (req.token <= this.floor || (highest !== null && req.token < highest)) {
      return { ok: false, reason: 'stale', highest };
    }
    if (req.check === 'lease') {
      const live = s.lease !== null && s.lease.expiresAt > now && s.lease.token === req.token;
      if (!live) return { ok: false, reason: 'lease-expired', highest };
    }
    const raised = max(highest, req.token) as bigint;
    if (req.record === 'shadow') {
      s.shadowHighest = raised;
      return { ok: true, highest: raised, lowerInflight: 0 };
    }
    const lowerInflight = this.lower(s, req.token).length;
    if (!req.record) return { ok: true, highest: raised, lowerInflight };
    s.highest = max(s.highest, req.token);
    const bound = lowerInflight === 0 ? deliveryBound(req) : 0;
    s.inflight.set(req.requestId, { token: req.token, session: req.session, bound });
    return { ok: true, highest: raised, lowerInflight };
  }

  async finish(lock: string, requestId: string): Promise<void> {
    this.clock();
    this.state(lock).inflight.delete(requestId);
    this.notify(lock);
  }

  async deliver(lock: string, requestId: string, boundMs: number): Promise<boolean> {
    this.clock();
    const e = this.state(lock).inflight.get(requestId);
    if (e === undefined) return false;
    e.bound = Math.max(0, Math.ceil(boundMs));
    return true;
  }

  async lowerInflight(lock: string, token: bigint): Promise<InflightState> {
    this.clock();
    const bounds = new Map<string, number>();
    const lower = this.lower(this.state(lock), token);
    for (const e of lower) bounds.set(e.session, Math.max(bounds.get(e.session) ?? 0, e.bound));
    return { count: lower.length, sessions: [...bounds.keys()], bounds: [...bounds.values()] };
  }

  async dropInflight(lock: string, sessions: readonly string[], maxBoundMs: number): Promise<void> {
    this.clock();
    const s = this.state(lock);
    for (const [id, e] of s.inflight)
      if (sessions.includes(e.session) && e.bound <= maxBoundMs) s.inflight.delete(id);
    this.notify(lock);
  }

  async beginIdempotent(req: IdempotentBegin): Promise<IdempotentBeginResult> {
    const now = this.clock();
    const rec = this.idempotency.get(req.key);
    if (rec === undefined || rec.until <= now) {
      const until = now + Math.max(1, Math.ceil(req.holdMs));
      this.idempotency.set(req.key, {
        fingerprint: req.fingerprint,
        attempt: req.attempt,
        until,
        response: null,
      });
      return { state: 'begun' };
    }
    if (rec.fingerprint !== req.fingerprint) return { state: 'mismatch' };
    if (rec.response === null) return { state: 'in-flight', retryAfterMs: Math.max(1, rec.until - now) };
    return { state: 'done', response: rec.response.slice() };
  }

  async finishIdempotent({ key, attempt, response, ttlMs }: IdempotentFinish): Promise<boolean> {
    const now = this.clock();
    const rec = this.idempotency.get(key);
    if (rec === undefined || rec.response !== null || rec.attempt !== attempt) return false;
    const until = now + Math.max(1, Math.ceil(ttlMs));
    this.idempotency.set(key, {
      fingerprint: rec.fingerprint,
      attempt: null,
      until,
      response: response.slice(),
    });
    return true;
  }

  async abandonIdempotent(key: string, attempt: string): Promise<void> {
    this.clock();
    const rec = this.idempotency.get(key);
    if (rec !== undefined && rec.response === null && rec.attempt === attempt) this.idempotency.delete(key);
  }

  async openSession(id: string, ttlMs: number): Promise<void> {
    this.clock();
    this.sessions.set(id, { beat: 0, ttlMs });
  }

  async beatSession(id: string): Promise<BeatResult> {
    const now = this.clock();
    const s = this.sessions.get(id);
    if (s === undefined) return { alive: false, now };
    s.beat += 1;
    return { alive: true, now };
  }

  async readSessions(ids: readonly string[] | null): Promise<Map<string, SessionRecord>> {
    this.clock();
    const out = new Map<string, SessionRecord>();
    for (const id of ids ?? this.sessions.keys()) {
      const s = this.sessions.get(id);
      if (s !== undefined) out.set(id, { ...s });
    }
    return out;
  }

  async endSession(id: string, ifBeat: number | null): Promise<boolean> {
    this.clock();
    const s = this.sessions.get(id);
    if (s === undefined || (ifBeat !== null && s.beat !== ifBeat)) return false;
    this.sessions.delete(id);
    for (const [lock, state] of this.keys) {
      // A delivering entry counts on after its session ended (until a gateway drops it).
      for (const [rid, e] of state.inflight)
        if (e.session === id && e.bound === 0) state.inflight.delete(rid);
      this.notify(lock);
    }
    return true;
  }

  async watch(key: string, listener: () => void): Promise<() => void> {
    this.clock();
    const set = this.listeners.get(key) ?? new Set();
    this.listeners.set(key, set);
    const wrapped = () => listener();
    set.add(wrapped);
    return () => set.delete(wrapped);
  }

  async bumpEpoch(): Promise<{ id: string; floor: bigint }> {
    const floor = BigInt(this.clock()) * 1000n;
    this.floor = floor > this.floor ? floor : this.floor;
    this.resets.emit({ reason: 'the epoch was bumped', floor: this.floor });
    return { id: randomUUID(), floor: this.floor };
  }

  async now(): Promise<number> {
    return this.clock();
  }

  async health(): Promise<StoreHealth> {
    return {
      ok: !this.closed,
      kind: this.kind,
      detail: 'memory',
      epoch: { id: 'memory', floor: this.floor },
    };
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  /** Test hook: how many in-flight entries the lock has (live or not). */
  inflightCount(lock: string): number {
    return this.keys.get(lock)?.inflight.size ?? 0;
  }

  private lower(s: KeyState, token: bigint) {
    return [...s.inflight.values()].filter(
      (e) => e.token < token && (this.sessions.has(e.session) || e.bound > 0),
    );
  }

  private describe(key: string, s: KeyState): LockState {
    const now = Date.now();
    const live = s.lease !== null && s.lease.expiresAt > now ? s.lease : null;
    return {
      key,
      held: live !== null,
      owner: live?.owner ?? null,
      leaseId: live?.leaseId ?? null,
      token: live?.token ?? s.issued,
      issued: s.issued,
      expiresAt: live?.expiresAt ?? null,
      waiters: s.waiters.filter((w) => w.deadline > now).length,
      highest: s.highest,
      shadowHighest: s.shadowHighest,
    };
  }

  private state(key: string): KeyState {
    let s = this.keys.get(key);
    if (s === undefined) {
      s = {
        issued: 0n,
        lease: null,
        waiters: [],
        highest: null,
        shadowHighest: null,
        inflight: new Map(),
        grants: new Map(),
        owners: [],
      };
      this.keys.set(key, s);
    }
    return s;
  }

  private notify(key: string): void {
    for (const l of this.listeners.get(key) ?? []) queueMicrotask(l);
  }

  private clock(): number {
    if (this.closed) throw new StoreUnavailableError('memory store is closed');
    return Date.now();
  }
}

function max(a: bigint | null, b: bigint | null): bigint | null {
  if (a === null) return b;
  if (b === null) return a;
  return a > b ? a : b;
}
