/**
 * GET /v1/locks: the locks with a live lease or live waiters, a page at a time (cursor),
 * filtered by key prefix; for operators and the dashboard's lock table. docs/events.md.
 */
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Store } from '../store/types.js';
import { encodeCursor, parseLocksQuery } from './event-query.js';

export interface LocksRoutesOptions {
  store: Store;
}

async function locksRoutes(app: FastifyInstance, opts: LocksRoutesOptions): Promise<void> {
  app.get('/v1/locks', async (request) => {
    const q = parseLocksQuery(request.query);
    const page = await opts.store.listLocks({ limit: q.limit, prefix: q.prefix, after: q.after });
    return {
      locks: page.locks.map((s) => ({
        key: s.key,
        held: s.held,
        owner: s.held ? s.owner : null,
        token: s.token.toString(10),
        highest: s.highest === null ? null : s.highest.toString(10),
        expiresAt: s.held && s.expiresAt !== null ? new Date(s.expiresAt).toISOString() : null,
        leaseRemainingMs: s.held && s.expiresAt !== null ? Math.max(0, s.expiresAt - page.now) : null,
        waiters: s.waiters,
      })),
      next: page.next === null ? null : encodeCursor(page.next),
    };
  });
}

export default fp(locksRoutes, { name: 'fencegate-locks-list', fastify: '5.x' });
