/**
 * A view of a Store in which every lock key is silently prefixed, so tests can share
 * one backend without seeing each other's locks and fences. Keys in results are mapped back.
 */
import type { LockState, Store } from '../../src/store/types.js';

export function withKeyPrefix(inner: Store, prefix: string): Store {
  const k = (key: string) => `${prefix}${key}`;
  const unk = (key: string) => (key.startsWith(prefix) ? key.slice(prefix.length) : key);
  const state = (s: LockState): LockState => ({ ...s, key: unk(s.key) });
  return {
    kind: inner.kind,
    async tryAcquire(req) {
      const r = await inner.tryAcquire({ ...req, key: k(req.key) });
      return r.ok ? { ...r, lease: { ...r.lease, key: req.key } } : r;
    },
    async renew(key, leaseId, ttlMs) {
      const r = await inner.renew(k(key), leaseId, ttlMs);
      return r.ok ? { ...r, lease: { ...r.lease, key } } : r;
    },
    release: (key, leaseId) => inner.release(k(key), leaseId),
    inspect: async (key) => {
      const s = await inner.inspect(k(key));
      return s === null ? null : state(s);
    },
    enqueueWaiter: (key, waiterId, waitMs) => inner.enqueueWaiter(k(key), waiterId, waitMs),
    removeWaiter: (key, waiterId) => inner.removeWaiter(k(key), waiterId),
    listLocks: async (query) => {
      const page = await inner.listLocks({
        ...query,
        prefix: k(query.prefix),
        after: query.after === null ? null : k(query.after),
      });
      return { ...page, locks: page.locks.map(state), next: page.next === null ? null : unk(page.next) };
    },
    recentGrants: (key) => inner.recentGrants(k(key)),
    admit: (req) => inner.admit({ ...req, lock: k(req.lock) }),
    finish: (lock, requestId) => inner.finish(k(lock), requestId),
    deliver: (lock, requestId, boundMs) => inner.deliver(k(lock), requestId, boundMs),
    onReset: (listener) => inner.onReset(listener),
    lowerInflight: (lock, token) => inner.lowerInflight(k(lock), token),
    dropInflight: (lock, sessions, maxBoundMs) => inner.dropInflight(k(lock), sessions, maxBoundMs),
    beginIdempotent: (req) => inner.beginIdempotent({ ...req, key: k(req.key) }),
    finishIdempotent: (done) => inner.finishIdempotent({ ...done, key: k(done.key) }),
    abandonIdempotent: (key, attempt) => inner.abandonIdempotent(k(key), attempt),
    openSession: (id, ttlMs) => inner.openSession(id, ttlMs),
    beatSession: (id) => inner.beatSession(id),
    readSessions: (ids) => inner.readSessions(ids),
    endSession: (id, ifBeat) => inner.endSession(id, ifBeat),
    watch: (key, listener) => inner.watch(k(key), listener),
    bumpEpoch: () => inner.bumpEpoch(),
    now: () => inner.now(),
    health: () => inner.health(),
    close: async () => undefined,
  };
}
