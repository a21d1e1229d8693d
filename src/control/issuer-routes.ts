/**
 * The issuer's HTTP API (docs/issuer.md), as a fastify plugin on the
 * control listener. Tokens leave as decimal strings; times as ISO-8601 (store clock).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { boundPrincipal, keyRefused } from '../auth/access.js';
import { BOUND_OWNER_MARK, boundOwner, ownerPrincipal } from '../auth/model.js';
import { ProblemError } from '../errors.js';
import { pathOf, refuse } from '../http/problems.js';
import type { EventInput, EventLog } from '../observe/events.js';
import type { SequencerIssuer } from '../sequencer/index.js';
import type { Lease, LockState } from '../store/types.js';
import type {
  Issuer,
  IssuerAcquireManyResult,
  IssuerAcquireResult,
  OrderViolation,
} from '../issuer/service.js';
import { parseAcquire, parseAcquireMany, parseRelease, parseRenew, validKey } from '../issuer/validate.js';

export interface IssuerRoutesOptions {
  issuer: Issuer;
  defaultTtlMs?: number;
  /** Where lease expiries, failed renewals and releases by a non-owner are recorded. */
  events?: EventLog;
  /** Signs a sequencer into every acquire and renew answer (absent: answers carry none). */
  sequencers?: SequencerIssuer | null;
}

type KeyParams = { key: string };

const iso = (ms: number) => new Date(ms).toISOString();

export function leaseJson(lease: Lease) {
  return {
    key: lease.key,
    owner: lease.owner,
    leaseId: lease.leaseId,
    token: lease.token.toString(10),
    expiresAt: iso(lease.expiresAt),
    ttlMs: lease.ttlMs,
  };
}

export function lockJson(s: LockState) {
  return {
    key: s.key,
    held: s.held,
    owner: s.held ? s.owner : null,
    token: s.token.toString(10),
    issued: s.issued.toString(10),
    highest: s.highest === null ? null : s.highest.toString(10),
    shadowHighest: s.shadowHighest === null ? null : s.shadowHighest.toString(10),
    expiresAt: s.held && s.expiresAt !== null ? iso(s.expiresAt) : null,
    waiters: s.waiters,
  };
}

/** A refused acquire (single or multi-lock) as its problem: `key` is the lock it concerns. */
function refuseAcquire(
  reply: FastifyReply,
  key: string,
  r: Exclude<IssuerAcquireResult | IssuerAcquireManyResult, { ok: true }>,
  requestId: string | undefined,
) {
  switch (r.reason) {
    case 'exhausted':
      return refuse(
        reply,
        'tokens-exhausted',
        `lock "${key}" has issued token 9223372036854775807 (2^63-1), the last one possible: it can never be granted again; use another key`,
        { lock: key },
      );
    case 'replay-ended':
      return refuse(
        reply,
        'replay-ended',
        `requestId "${requestId ?? ''}" was granted lease ${r.leaseId} (token ${r.token}), which is no longer current; nothing was granted`,
        { lock: key, leaseId: r.leaseId, token: r.token },
      );
    case 'lock-order':
      return refuse(
        reply,
        'lock-order',
        `this owner holds "${r.heldKey}", which sorts after "${key}": take locks in canonical order (byte order of the UTF-8 key), or all at once with acquire-many`,
        { lock: key, heldKey: r.heldKey },
      );
    case 'lease-lost':
      return refuse(
        reply,
        'lease-lost',
        `the lease of "${key}", taken earlier in this acquire, was lost while a later key was waited for; nothing is held`,
        { lock: key },
      );
    case 'held': {
      const retryAfterMs = Math.max(1, r.retryAfterMs);
      const detail =
        r.blockedBy === 'lease'
          ? `lock "${key}" is held`
          : `lock "${key}" is free, but waiters are queued ahead of this request`;
      return refuse(
        reply,
        'lock-held',
        detail,
        { lock: key, retryAfterMs, blockedBy: r.blockedBy },
        { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) },
      );
    }
  }
}

async function issuerRoutes(app: FastifyInstance, opts: IssuerRoutesOptions): Promise<void> {
  const { issuer } = opts;
  const defaultTtl = opts.defaultTtlMs ?? 10_000;
  const sequencers = opts.sequencers ?? null;
  const signed = async (lease: Lease) =>
    sequencers === null ? {} : { sequencer: await sequencers.sign(lease) };
  const keyOf = (req: FastifyRequest<{ Params: KeyParams }>) => validKey(req.params.key);
  const record = (
    req: FastifyRequest,
    lock: string,
    what: Pick<EventInput, 'type' | 'reason' | 'token' | 'highest' | 'owner'> &
      Partial<Pick<EventInput, 'enforced' | 'heldKey'>>,
  ) =>
    opts.events?.record({
      time: new Date().toISOString(),
      type: what.type,
      reason: what.reason,
      route: null,
      lock,
      token: what.token,
      highest: what.highest,
      enforced: what.enforced ?? true,
      client: req.ip,
      owner: what.owner,
      method: req.method,
      path: pathOf(req.url),
      ...(what.heldKey === undefined ? {} : { heldKey: what.heldKey }),
    });

  /**
   * With an auth file, a lease belongs to the principal that took it: the owner is
   * recorded as `@<principal>/<owner>`, so the store's replay by (key, requestId, owner)
   * only ever matches the same principal's requests, and renew and release check the
   * live lease's recorded principal before they touch it (a lease id names one grant,
   * whose owner never changes, so what inspect shows is what renew or release would act
   * on; a lease id that is not live there the store refuses by itself).
   */
  const refuseOthersLease = async (req: FastifyRequest, key: string, leaseId: string, verb: string) => {
    const principal = boundPrincipal(req);
    if (principal === null) return;
    const s = await issuer.inspect(key);
    if (s === null || s.leaseId !== leaseId || ownerPrincipal(s.owner) === principal) return;
    throw new ProblemError(
      'forbidden',
      `principal "${principal}" may not ${verb} a lease another principal took`,
      {
        principal,
        verb,
        lock: key,
        leaseId,
      },
    );
  };

  /** The owner as recorded: with an auth file, `@<principal>/<owner>`. */
  const bound = <T extends { owner: string }>(req: FastifyRequest, parsed: T): T => {
    const principal = boundPrincipal(req);
    // Without a principal, an owner may not look bound: a lease taken now must never be
    // renewable by the principal its owner names once an auth file is in force.
    if (principal === null && parsed.owner.startsWith(BOUND_OWNER_MARK))
      throw new ProblemError(
        'bad-request',
        `"owner" may not start with "${BOUND_OWNER_MARK}": owners of that form name the principal an auth file binds them to`,
        { field: 'owner' },
      );
    return principal === null ? parsed : { ...parsed, owner: boundOwner(principal, parsed.owner) };
  };

  /**
   * Runs an acquire with a signal that fires when the client hangs up, so it stops waiting
   * in the queue. (The response's 'close', not the request's: a request emits 'close' as
   * soon as its body has been read.)
   */
  const untilHangUp = async <T>(
    reply: FastifyReply,
    run: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> => {
    const abort = new AbortController();
    const onClose = () => abort.abort();
    reply.raw.once('close', onClose);
    try {
      return await run(abort.signal);
    } finally {
      reply.raw.off('close', onClose);
    }
  };

  /** An ordering violation (docs/issuer.md): an event, enforced when it was refused. */
  const orderEvent = (req: FastifyRequest, owner: string) => (v: OrderViolation) =>
    record(req, v.key, {
      type: 'lock-order',
      reason: v.refused ? 'order-refused' : 'order-counted',
      token: null,
      highest: null,
      owner,
      enforced: v.refused,
      heldKey: v.heldKey,
    });

  /** The lapsed lease a grant took over: its holder never released it (a crash, a pause, a lost renewal). */
  const lapsedEvent = (
    req: FastifyRequest,
    key: string,
    lapsed: { owner: string; token: bigint },
    by: bigint,
  ) =>
    record(req, key, {
      type: 'lease-expired',
      reason: 'expired',
      token: lapsed.token.toString(10),
      highest: by.toString(10),
      owner: lapsed.owner,
    });

  app.post<{ Params: KeyParams }>('/v1/locks/:key/acquire', async (req, reply) => {
    const key = keyOf(req);
    const body = bound(req, parseAcquire(req.body, issuer.limits, defaultTtl));
    const r = await untilHangUp(reply, (signal) =>
      issuer.acquire({ key, ...body, onOrderViolation: orderEvent(req, body.owner) }, signal),
    );
    if (!r.ok) return refuseAcquire(reply, key, r, body.requestId);
    if (r.lapsed !== null) lapsedEvent(req, key, r.lapsed, r.lease.token);
    return reply.code(200).send({
      ...leaseJson(r.lease),
      ...(await signed(r.lease)),
      replayed: r.replayed,
      waitedMs: r.waitedMs,
    });
  });

  app.post('/v1/locks/acquire-many', async (req, reply) => {
    const body = bound(req, parseAcquireMany(req.body, issuer.limits, defaultTtl));
    const outside = keyRefused(req, 'acquire', body.keys);
    if (outside !== null) {
      throw new ProblemError(
        'forbidden',
        `principal "${boundPrincipal(req) ?? ''}" may not acquire lock "${outside}"`,
        { principal: boundPrincipal(req), verb: 'acquire', lock: outside },
      );
    }
    const r = await untilHangUp(reply, (signal) =>
      issuer.acquireMany({ ...body, onOrderViolation: orderEvent(req, body.owner) }, signal),
    );
    if (!r.ok)
      return refuseAcquire(
        reply,
        r.reason === 'lock-order' ? (body.keys[0] ?? '') : r.key,
        r,
        body.requestId,
      );
    for (const l of r.lapsed) lapsedEvent(req, l.key, l, r.leases.find((x) => x.key === l.key)?.token ?? 0n);
    const locks = [];
    for (const lease of r.leases)
      locks.push({ key: lease.key, token: lease.token.toString(10), ...(await signed(lease)) });
    return reply.code(200).send({
      owner: r.owner,
      leaseId: r.leaseId,
      expiresAt: iso(r.expiresAt),
      ttlMs: r.ttlMs,
      locks,
      replayed: r.replayed,
      waitedMs: r.waitedMs,
    });
  });

  app.post<{ Params: KeyParams }>('/v1/locks/:key/renew', async (req, reply) => {
    const key = keyOf(req);
    const body = parseRenew(req.body, issuer.limits, defaultTtl);
    await refuseOthersLease(req, key, body.leaseId, 'renew');
    const r = await issuer.renew(key, body.leaseId, body.ttlMs);
    if (!r.ok) {
      record(req, key, {
        type: 'renew-failed',
        reason: 'lease-lost',
        token: null,
        highest: null,
        owner: null,
      });
      return refuse(reply, 'lease-lost', 'the lease has expired or was taken over', {
        lock: key,
        leaseId: body.leaseId,
      });
    }
    const l = r.lease;
    return {
      key: l.key,
      leaseId: l.leaseId,
      token: l.token.toString(10),
      expiresAt: iso(l.expiresAt),
      ttlMs: l.ttlMs,
      ...(await signed(l)),
    };
  });

  app.post<{ Params: KeyParams }>('/v1/locks/:key/release', async (req, reply) => {
    const key = keyOf(req);
    const body = parseRelease(req.body);
    await refuseOthersLease(req, key, body.leaseId, 'release');
    const r = await issuer.release(key, body.leaseId);
    if (!r.ok) {
      record(req, key, {
        type: 'release-not-owner',
        reason: 'not-owner',
        token: null,
        highest: null,
        owner: null,
      });
      return refuse(reply, 'not-owner', 'this lease does not hold the lock', {
        lock: key,
        leaseId: body.leaseId,
      });
    }
    return { released: true };
  });

  app.get<{ Params: KeyParams }>('/v1/locks/:key', async (req) => {
    const key = keyOf(req);
    const s = await issuer.inspect(key);
    if (s === null)
      throw new ProblemError(
        'lock-not-found',
        `no token was issued for "${key}" (or, on the embedded store, none since its idle record was retired)`,
        { lock: key },
      );
    return lockJson(s);
  });
}

export default fp(issuerRoutes, { name: 'fencegate-issuer', fastify: '5.x' });
