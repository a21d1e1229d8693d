/**
 * The issuer's HTTP API (docs/issuer.md), as a fastify plugin on the
 * control listener. Tokens leave as decimal strings; times as ISO-8601 (store clock).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { boundPrincipal } from '../auth/access.js';
import { BOUND_OWNER_MARK, boundOwner, ownerPrincipal } from '../auth/model.js';
import { ProblemError } from '../errors.js';
import { pathOf, refuse } from '../http/problems.js';
import type { EventInput, EventLog } from '../observe/events.js';
import type { SequencerIssuer } from '../sequencer/index.js';
import type { Lease, LockState } from '../store/types.js';
import type { Issuer } from '../issuer/service.js';
import { parseAcquire, parseRelease, parseRenew, validKey } from '../issuer/validate.js';

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
    what: Pick<EventInput, 'type' | 'reason' | 'token' | 'highest' | 'owner'>,
  ) =>
    opts.events?.record({
      time: new Date().toISOString(),
      type: what.type,
      reason: what.reason,
      route: null,
      lock,
      token: what.token,
      highest: what.highest,
      enforced: true,
      client: req.ip,
      owner: what.owner,
      method: req.method,
      path: pathOf(req.url),
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

  app.post<{ Params: KeyParams }>('/v1/locks/:key/acquire', async (req, reply) => {
    const key = keyOf(req);
    const parsed = parseAcquire(req.body, issuer.limits, defaultTtl);
    const principal = boundPrincipal(req);
    // Without a principal, an owner may not look bound: a lease taken now must never be
    // renewable by the principal its owner names once an auth file is in force.
    if (principal === null && parsed.owner.startsWith(BOUND_OWNER_MARK))
      throw new ProblemError(
        'bad-request',
        `"owner" may not start with "${BOUND_OWNER_MARK}": owners of that form name the principal an auth file binds them to`,
        { field: 'owner' },
      );
    const body = principal === null ? parsed : { ...parsed, owner: boundOwner(principal, parsed.owner) };
    // A client that hangs up stops waiting in the queue. (The response's 'close', not the
    // request's: a request emits 'close' as soon as its body has been read.)
    const abort = new AbortController();
    const onClose = () => abort.abort();
    reply.raw.once('close', onClose);
    try {
      const r = await issuer.acquire({ key, ...body }, abort.signal);
      if (r.ok && r.lapsed !== null) {
        // The issuer sees a lease lapse when it takes it over: the lapsed lease's holder
        // never released it (a crash, a pause, a lost renewal).
        record(req, key, {
          type: 'lease-expired',
          reason: 'expired',
          token: r.lapsed.token.toString(10),
          highest: r.lease.token.toString(10),
          owner: r.lapsed.owner,
        });
      }
      if (r.ok) {
        return reply.code(200).send({
          ...leaseJson(r.lease),
          ...(await signed(r.lease)),
          replayed: r.replayed,
          waitedMs: r.waitedMs,
        });
      }
      if (r.reason === 'exhausted') {
        return refuse(
          reply,
          'tokens-exhausted',
          `lock "${key}" has issued token 9223372036854775807 (2^63-1), the last one possible: it can never be granted again; use another key`,
          { lock: key },
        );
      }
      if (r.reason === 'replay-ended') {
        return refuse(
          reply,
          'replay-ended',
          `requestId "${body.requestId ?? ''}" was granted lease ${r.leaseId} (token ${r.token}), which is no longer current; nothing was granted`,
          { lock: key, leaseId: r.leaseId, token: r.token },
        );
      }
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
        {
          'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))),
        },
      );
    } finally {
      reply.raw.off('close', onClose);
    }
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
      throw new ProblemError('lock-not-found', `no token was ever issued for "${key}"`, { lock: key });
    return lockJson(s);
  });
}

export default fp(issuerRoutes, { name: 'fencegate-issuer', fastify: '5.x' });
