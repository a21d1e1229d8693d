/**
 * GET /v1/locks: the locks with a live lease or live waiters, a page at a time (cursor),
 * filtered by key prefix; for operators and the dashboard's lock table. docs/events.md.
 */
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { visiblePrefixes } from '../auth/access.js';
import { under } from '../auth/model.js';
import type { ListLocksQuery, LockPage, Store } from '../store/types.js';
import { encodeCursor, parseLocksQuery } from '../observe/event-query.js';

export interface LocksRoutesOptions {
  store: Store;
}

async function locksRoutes(app: FastifyInstance, opts: LocksRoutesOptions): Promise<void> {
  app.get('/v1/locks', async (request) => {
    const q = parseLocksQuery(request.query);
    const page = await listVisible(opts.store, { limit: q.limit, prefix: q.prefix, after: q.after }, [
      ...(visiblePrefixes(request, 'read') ?? ['']),
    ]);
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

/**
 * The page of locks under `prefixes` (the principal's `read` prefixes; [''] for all):
 * live tokens and owners are shown only to who may read them. When one readable prefix
 * lies under the requested one, the store is asked for that prefix alone, so pages are
 * full; with several, the page is filtered (it may hold fewer than `limit`; `next`
 * still leads on).
 */
async function listVisible(store: Store, query: ListLocksQuery, prefixes: string[]): Promise<LockPage> {
  if (under(prefixes, query.prefix)) return store.listLocks(query);
  const inside = prefixes.filter((p) => p.startsWith(query.prefix));
  if (inside.length === 0) return { locks: [], next: null, now: 0 };
  if (inside.length === 1) {
    const narrowed = inside[0] as string;
    const after = query.after !== null && query.after < narrowed ? null : query.after;
    return store.listLocks({ ...query, prefix: narrowed, after });
  }
  const page = await store.listLocks(query);
  return { ...page, locks: page.locks.filter((s) => under(inside, s.key)) };
}

export default fp(locksRoutes, { name: 'fencegate-locks-list', fastify: '5.x' });
