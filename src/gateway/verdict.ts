/**
 * The fence decision for one lock of a request on a fenced route, from headers alone:
 * the token from the Fencing-Token header (or, on `check: sequencer` routes, from the
 * Fencing-Sequencer header once its signature, lock and expiry verified), then the
 * store's atomic admission (or, for a kind that fences inside the resource, the store's
 * verdict without recording), made by the gateway's Judge (built once with the store
 * guard, sequencer keys, stale caches and admission holds) from the request's facts.
 * Refusals are values (with the problem to send and the reason to count), never
 * exceptions; only the store failing throws.
 */
import type { IncomingMessage } from 'node:http';
import { ProblemError } from '../errors.js';
import type { CompiledRoute, FencingSettings } from '../policy/index.js';
import type { FencingToken } from '../tokens.js';
import type { SequencerVerifier } from '../sequencer/index.js';
import type { AdmitCheck } from '../store/types.js';
import { FENCING_TOKEN, rawHeaderValues, readFencingSequencer, readFencingToken } from './headers.js';
import type { FencedReason } from './reasons.js';
import type { AdmissionHolds, Hold } from './admission-hold.js';
import type { SessionLease } from './session.js';
import type { StaleCache } from './stale-cache.js';
import type { StoreGuard } from './store-guard.js';

export type Verdict =
  | {
      ok: true;
      lock: string;
      token: FencingToken;
      highest: FencingToken;
      lowerInflight: number;
      /** The admission hold this write joined (no store call), or null: the store admitted it. */
      hold: Hold | null;
    }
  | {
      ok: false;
      problem: ProblemError;
      reason: FencedReason;
      lock: string;
      token: FencingToken | null;
      highest: FencingToken | null;
    };

/**
 * The facts of one request that its verdicts are made from: per request, never the
 * process's collaborators (those are the Judge's). An Admission (admission.ts) is one.
 */
export interface VerdictRequest {
  readonly route: CompiledRoute & { fencing: FencingSettings };
  /**
   * What the store's admission records (AdmitRequest.record): true for an enforced route
   * fenced in the gateway, 'shadow' in shadow mode (the shadow record), false for a kind
   * that fences inside the resource (judge only).
   */
  readonly record: boolean | 'shadow';
  /** The delivery bound to record on the entry when it leaves at once (0: it waits for its body first). */
  readonly deliveryBoundMs: number;
  readonly raw: IncomingMessage;
  /** The request, whose id names its in-flight entry (read only when the store is asked). */
  readonly request: { readonly id: string };
  /**
   * The gateway session the in-flight entry will belong to (null when nothing is recorded;
   * null while recording: this process has no valid session, 503 with the store untouched).
   */
  readonly lease: SessionLease | null;
}

/** What a Judge is built with: the process's collaborators, made once. */
export interface JudgeParts {
  guard: StoreGuard;
  /** Verifies sequencers (check: sequencer); null when this gateway has no keys. */
  sequencers: SequencerVerifier | null;
  /** What this gateway already knows is stale for the enforced fence (stale-cache.ts), consulted before the store. */
  cache: StaleCache;
  /** The same for the shadow record: shadow-mode routes judge against it alone. */
  shadowCache: StaleCache;
  /** Admissions of this process that a write of the same token may join (admission-hold.ts). */
  holds: AdmissionHolds;
  /** The last stale refusal per lock, answered again to the same token. */
  refusals: StaleRefusals;
}

/** A verdict that refuses the write. */
export type Refusal = Extract<Verdict, { ok: false }>;

type Presented = { ok: true; token: FencingToken } | { ok: false; verdict: Refusal };

/** Makes the verdicts of one gateway: built once with its collaborators, asked per request and lock. */
export class Judge {
  constructor(private readonly parts: JudgeParts) {}

  /**
   * The verdict on `lock`: at once (no promise) when it needs no waiting (a refused or
   * known-stale token, no session, a joined hold), else once the sequencer is verified or
   * the store answered.
   */
  verdict(req: VerdictRequest, lock: string): Verdict | Promise<Verdict> {
    if (req.route.fencing.check === 'sequencer')
      return this.sequencerToken(req, lock).then((presented) => this.judge(req, lock, presented));
    return this.judge(req, lock, bareToken(req, lock));
  }

  /**
   * The verdict when it needs no waiting and changes nothing: a refusal of a missing,
   * malformed or known-stale token, or of a write with no session to record it under;
   * null when the store (or a hold, or a sequencer's verification) must judge. What the
   * refusal lane answers before node:http sees the request (src/http/lane.ts).
   */
  refusalNow(req: VerdictRequest, lock: string): Refusal | null {
    if (req.route.fencing.check === 'sequencer') return null;
    const presented = bareToken(req, lock);
    return presented.ok ? this.refusedAtOnce(req, lock, presented.token) : presented.verdict;
  }

  /**
   * Known stale here: the store would refuse it too (its fence and floor only rise), so it
   * is refused without asking, whatever the store's state. Only 'stale' is answered from
   * the cache: forged tokens and lease checks need the store.
   */
  private refusedAtOnce(req: VerdictRequest, lock: string, token: FencingToken): Refusal | null {
    const known = this.cacheOf(req).refuses(lock, token);
    if (known !== null) return this.parts.refusals.of(lock, token, known.highest);
    if (req.record === true && req.lease === null) {
      const problem = new ProblemError(
        'fence-unavailable',
        'this gateway has no live session with the fence store; the write was not forwarded',
        { lock },
        { headers: { 'retry-after': '1' } },
      );
      return { ok: false, problem, reason: 'unavailable', lock, token, highest: null };
    }
    return null;
  }

  private judge(req: VerdictRequest, lock: string, presented: Presented): Verdict | Promise<Verdict> {
    if (!presented.ok) return presented.verdict;
    const token = presented.token;
    const fencingCheck = req.route.fencing.check;
    // A verified sequencer is admitted as a token: stale → 409, never issued → 403.
    const check: AdmitCheck = fencingCheck === 'sequencer' ? 'token' : (fencingCheck as AdmitCheck);
    const refused = this.refusedAtOnce(req, lock, token);
    if (refused !== null) return refused;
    // The same token as an admission of this process whose entry still counts: admitted
    // without asking (a `lease` check wants the store to judge liveness every time).
    if (req.record === true && req.lease !== null && check === 'token') {
      const hold = this.parts.holds.join(lock, token, req.lease, req.deliveryBoundMs);
      if (hold !== null) return { ok: true, lock, token, highest: hold.highest, lowerInflight: 0, hold };
    }
    return this.askStore(req, lock, token, check);
  }

  /** The store's atomic admission of `token` (recorded, or judged only). */
  private async askStore(
    req: VerdictRequest,
    lock: string,
    token: FencingToken,
    check: AdmitCheck,
  ): Promise<Verdict> {
    let result;
    try {
      result = await this.parts.guard.admit({
        lock,
        token,
        check,
        requestId: req.request.id,
        session: req.lease?.id ?? '',
        record: req.record,
        deliveryBoundMs: req.deliveryBoundMs,
      });
    } catch (err) {
      return {
        ok: false,
        problem: fenceUnavailable(err, lock),
        reason: 'unavailable',
        lock,
        token,
        highest: null,
      };
    }
    this.cacheOf(req).learn(lock, token, req.record !== false, result);
    if (result.ok) {
      const { highest, lowerInflight } = result;
      return { ok: true, lock, token, highest, lowerInflight, hold: null };
    }
    return this.storeRefusal(lock, token, result.reason, result.highest);
  }

  /** The store refused `token` on `lock`: the verdict that says why. */
  private storeRefusal(
    lock: string,
    token: FencingToken,
    reason: 'stale' | 'forged' | 'lease-expired',
    highest: FencingToken | null,
  ): Refusal {
    switch (reason) {
      case 'stale':
        return this.parts.refusals.of(lock, token, highest);
      case 'forged': {
        const detail = `token ${token} was never issued for lock "${lock}"`;
        return refused('token-invalid', detail, 'forged', lock, token, highest);
      }
      case 'lease-expired': {
        const detail = `the lease of token ${token} on lock "${lock}" is no longer live`;
        return refused('lease-expired', detail, 'lease', lock, token, highest);
      }
    }
  }

  /** The stale cache a request is judged against: the shadow record's in shadow mode. */
  private cacheOf(req: VerdictRequest): StaleCache {
    return req.record === 'shadow' ? this.parts.shadowCache : this.parts.cache;
  }

  /**
   * The token inside a verified sequencer. A bare Fencing-Token (which anyone can learn) is
   * never enough here; sent along with a sequencer it must be the sequencer's token.
   */
  private async sequencerToken({ route, raw }: VerdictRequest, lock: string): Promise<Presented> {
    const no = (verdict: Refusal): Presented => ({ ok: false, verdict });
    const presented = readFencingSequencer(raw.rawHeaders);
    if (presented.kind === 'missing') {
      const alone = rawHeaderValues(raw.rawHeaders, FENCING_TOKEN).length > 0;
      const detail =
        `route "${route.name}" requires a Fencing-Sequencer header for lock "${lock}"` +
        (alone ? ' (a Fencing-Token alone is not accepted on this route)' : '');
      return no(refused('sequencer-required', detail, 'missing', lock, null, null));
    }
    if (presented.kind === 'malformed')
      return no(refused('token-malformed', presented.reason, 'malformed', lock, null, null));
    const bare = readFencingToken(raw.rawHeaders);
    if (bare.kind === 'malformed')
      return no(refused('token-malformed', bare.reason, 'malformed', lock, null, null));
    const sequencers = this.parts.sequencers;
    if (sequencers === null) {
      const detail = 'this gateway has no sequencer keys configured: no sequencer can be verified';
      return no(refused('token-invalid', detail, 'forged', lock, null, null));
    }
    const verified = await sequencers.verify(presented.sequencer, lock);
    if (!verified.ok) return no(refused('token-invalid', verified.reason, 'forged', lock, null, null));
    const token = verified.claims.token;
    if (bare.kind === 'ok' && bare.token !== token) {
      const detail = `Fencing-Token ${bare.token} is not the token of the sequencer sent with it`;
      return no(refused('token-invalid', detail, 'forged', lock, null, null));
    }
    return { ok: true, token };
  }
}

/** The default number of locks whose last stale refusal is kept. */
export const STALE_REFUSALS_KEPT = 1024;

/**
 * 409 stale-token verdicts, the last one per lock kept: a stale flood repeats one token,
 * and its refusal (the problem, its detail text and its JSON) is the same immutable value
 * each time, made once instead of per write. At most `capacity` locks; the lock whose kept
 * refusal was made longest ago is forgotten first (a hit costs one lookup, no reordering).
 */
export class StaleRefusals {
  private readonly last = new Map<string, Refusal>();

  constructor(readonly capacity: number = STALE_REFUSALS_KEPT) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('capacity must be an integer ≥ 1');
  }

  /** Locks whose refusal is kept now (≤ capacity). */
  get size(): number {
    return this.last.size;
  }

  /** The stale refusal of `token` on `lock`, `highest` being the store's answer or the cache's (a lower bound). */
  of(lock: string, token: FencingToken, highest: FencingToken | null): Refusal {
    const kept = this.last.get(lock);
    if (kept !== undefined && kept.token === token && kept.highest === highest) return kept;
    const verdict = staleRefusal(lock, token, highest);
    if (kept !== undefined) this.last.delete(lock);
    else if (this.last.size >= this.capacity) {
      const oldest = this.last.keys().next();
      if (oldest.done !== true) this.last.delete(oldest.value);
    }
    this.last.set(lock, verdict);
    return verdict;
  }
}

function staleRefusal(lock: string, token: FencingToken, highest: FencingToken | null): Refusal {
  const detail =
    highest !== null && token < highest
      ? `token ${token} is older than ${highest}, already admitted for lock "${lock}"`
      : `token ${token} is at or below the current epoch floor of lock "${lock}"`;
  return refused('stale-token', detail, 'stale', lock, token, highest);
}

function bareToken({ route, raw }: VerdictRequest, lock: string): Presented {
  const presented = readFencingToken(raw.rawHeaders);
  if (presented.kind === 'missing') {
    const detail = `route "${route.name}" requires a Fencing-Token header for lock "${lock}"`;
    return { ok: false, verdict: refused('token-required', detail, 'missing', lock, null, null) };
  }
  if (presented.kind === 'malformed') {
    return {
      ok: false,
      verdict: refused('token-malformed', presented.reason, 'malformed', lock, null, null),
    };
  }
  return { ok: true, token: presented.token };
}

function refused(
  code:
    | 'token-required'
    | 'sequencer-required'
    | 'token-malformed'
    | 'stale-token'
    | 'token-invalid'
    | 'lease-expired',
  detail: string,
  reason: FencedReason,
  lock: string,
  token: FencingToken | null,
  highest: FencingToken | null,
): Refusal {
  const extra = { lock, token: token ?? undefined, highest: highest ?? undefined };
  return { ok: false, problem: ProblemError.expected(code, detail, extra), reason, lock, token, highest };
}

/** The store failed: 503 fence-unavailable for `lock`, keeping the guard's detail and Retry-After. */
export function fenceUnavailable(err: unknown, lock: string): ProblemError {
  const guarded = err instanceof ProblemError ? err : null;
  return new ProblemError(
    'fence-unavailable',
    guarded?.message ?? 'the fence store is unavailable; the write was not forwarded',
    { lock },
    { cause: guarded?.cause ?? err, headers: guarded?.headers ?? { 'retry-after': '1' } },
  );
}
