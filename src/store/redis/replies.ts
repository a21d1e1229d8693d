/**
 * Parsing of script replies. Scripts return arrays of strings (tokens as canonical
 * decimal strings, times as integral ms strings); anything else means the store is not
 * what we think it is, and is reported as StoreUnavailableError.
 */
import { StoreUnavailableError } from '../../errors.js';
import { parseToken, type FencingToken } from '../../tokens.js';
import type {
  AcquireResult,
  AdmitResult,
  BeatResult,
  IdempotentBeginResult,
  InflightState,
  Lease,
  LockState,
  RenewResult,
  SessionRecord,
} from '../types.js';

export class ReplyReader {
  private readonly items: readonly unknown[];

  constructor(
    reply: unknown,
    private readonly op: string,
  ) {
    if (!Array.isArray(reply)) throw this.bad(`expected an array, got ${typeof reply}`);
    this.items = reply;
  }

  get length(): number {
    return this.items.length;
  }

  bad(what: string): StoreUnavailableError {
    return new StoreUnavailableError(`unexpected reply from redis script ${this.op}: ${what}`);
  }

  str(i: number): string {
    const v = this.items[i];
    if (typeof v !== 'string') throw this.bad(`element ${i} is not a string`);
    return v;
  }

  /** '' -> null. */
  optStr(i: number): string | null {
    const v = this.str(i);
    return v === '' ? null : v;
  }

  int(i: number): number {
    const s = this.str(i);
    if (!/^-?[0-9]+$/.test(s)) throw this.bad(`element ${i} is not an integer`);
    return Number(s);
  }

  token(i: number): FencingToken {
    const p = parseToken(this.str(i));
    if (!p.ok) throw this.bad(`element ${i} is not a token (${p.reason})`);
    return p.token;
  }

  optToken(i: number): FencingToken | null {
    return this.str(i) === '' ? null : this.token(i);
  }

  flag(i: number): boolean {
    return this.str(i) === '1';
  }
}

/** 'exhausted' when the token space of the key is used up. */
export function parseAcquire(reply: unknown, key: string): AcquireResult | 'exhausted' {
  const r = new ReplyReader(reply, 'fg_acquire_v4');
  const status = r.str(0);
  if (status === 'held') {
    const blockedBy = r.str(2);
    if (blockedBy !== 'lease' && blockedBy !== 'queue') throw r.bad(`blockedBy ${blockedBy}`);
    return { ok: false, reason: 'held', blockedBy, retryAfterMs: Math.max(1, r.int(1)) };
  }
  if (status === 'ended') return { ok: false, reason: 'replay-ended', leaseId: r.str(1), token: r.token(2) };
  if (status === 'exhausted') return 'exhausted';
  if (status !== 'ok') throw r.bad(`status ${status}`);
  const lease: Lease = {
    key,
    leaseId: r.str(1),
    owner: r.str(2),
    token: r.token(3),
    expiresAt: r.int(4),
    ttlMs: r.int(5),
  };
  const tookOverExpired = r.flag(7);
  const lapsedOwner = r.str(8);
  const lapsedToken = r.optToken(9);
  const lapsed = tookOverExpired && lapsedToken !== null ? { owner: lapsedOwner, token: lapsedToken } : null;
  return { ok: true, lease, replayed: r.flag(6), tookOverExpired, lapsed };
}

export function parseRenew(reply: unknown, key: string, leaseId: string): RenewResult {
  const r = new ReplyReader(reply, 'fg_renew_v2');
  const status = r.str(0);
  if (status === 'lost') return { ok: false, reason: 'lease-lost' };
  if (status !== 'ok') throw r.bad(`status ${status}`);
  return {
    ok: true,
    lease: { key, leaseId, owner: r.str(1), token: r.token(2), expiresAt: r.int(3), ttlMs: r.int(4) },
  };
}

export function parseInspect(reply: unknown, key: string): LockState | null {
  if (reply === null) return null;
  const r = new ReplyReader(reply, 'fg_inspect_v3');
  const issued = r.token(0);
  const held = r.flag(1);
  return {
    key,
    held,
    owner: held ? r.str(2) : null,
    leaseId: held ? r.str(3) : null,
    token: held ? r.token(4) : issued,
    issued,
    expiresAt: held ? r.int(5) : null,
    waiters: r.int(6),
    highest: r.optToken(7),
    shadowHighest: r.optToken(8),
  };
}

/** The admission at position `at` of a fg_fence_batch_v2 reply (three elements). */
export function parseAdmitAt(r: ReplyReader, at: number): AdmitResult {
  const status = r.str(at);
  switch (status) {
    case 'ok':
      return { ok: true, highest: r.token(at + 1), lowerInflight: r.int(at + 2) };
    case 'stale':
    case 'forged':
    case 'lease-expired':
      return { ok: false, reason: status, highest: r.optToken(at + 1) };
    case 'error':
      throw r.bad(`admission failed: ${r.str(at + 1)}`);
    default:
      throw r.bad(`admission status ${status}`);
  }
}

/** The finish at position `at` of a fg_fence_batch_v2 reply: whether the entry existed. */
export function parseFinishAt(r: ReplyReader, at: number): boolean {
  const v = r.str(at);
  if (v !== '0' && v !== '1')
    throw r.bad(v.startsWith('error: ') ? `finish failed: ${v.slice(7)}` : `element ${at} is not 0 or 1`);
  return v === '1';
}

export function parseInflight(reply: unknown): InflightState {
  const r = new ReplyReader(reply, 'fg_lower_inflight_v3');
  const sessions: string[] = [];
  const bounds: number[] = [];
  for (let i = 1; i + 1 < r.length; i += 2) {
    sessions.push(r.str(i));
    bounds.push(r.int(i + 1));
  }
  return { count: r.int(0), sessions, bounds };
}

export function parseIdempotentBegin(reply: unknown): IdempotentBeginResult {
  const r = new ReplyReader(reply, 'fg_idem_begin_v1');
  const state = r.str(0);
  if (state === 'begun' || state === 'mismatch') return { state };
  if (state === 'in-flight') return { state, retryAfterMs: Math.max(1, r.int(1)) };
  if (state === 'done') return { state, response: new Uint8Array(Buffer.from(r.str(1), 'base64')) };
  throw r.bad(`unknown state ${state}`);
}

export function parseBeat(reply: unknown): BeatResult {
  const r = new ReplyReader(reply, 'fg_session_beat_v1');
  return { alive: r.str(0) === '1', now: r.int(1) };
}

/** The `gateways` hash's values: '<beat> <ttlMs>'; malformed entries are left out. */
export function parseSessionRecord(value: string): SessionRecord | null {
  const m = /^(\d+) (\d+)$/.exec(value);
  if (m === null) return null;
  return { beat: Number(m[1]), ttlMs: Number(m[2]) };
}

export function parseEpoch(reply: unknown, op: string): { id: string; floor: FencingToken } {
  const r = new ReplyReader(reply, op);
  // A floor has the shape of a token (clock ms * 1000, never 0).
  return { id: r.str(0), floor: r.token(1) };
}

/** fg_epoch_verify_v1's answer: the epoch now and what the check did. */
export function parseEpochVerify(
  reply: unknown,
  script = 'fg_epoch_verify_v1',
): {
  id: string;
  floor: FencingToken;
  outcome: 'same' | 'created' | 'adopted' | 'restarted' | 'bumped' | 'raised';
} {
  const r = new ReplyReader(reply, script);
  const outcome = r.str(2);
  if (
    outcome !== 'same' &&
    outcome !== 'created' &&
    outcome !== 'adopted' &&
    outcome !== 'restarted' &&
    outcome !== 'bumped' &&
    outcome !== 'raised'
  )
    throw r.bad(`outcome ${outcome}`);
  return { id: r.str(0), floor: r.token(1), outcome };
}
