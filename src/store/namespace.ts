/**
 * The store namespace (`--store-namespace`): the Redis key prefix, or the Postgres /
 * embedded schema name. One rule for every backend and for the configuration, so a
 * namespace that works on one store works on all: 1–53 of A–Z a–z 0–9 _ -, not starting
 * with `pg_` (reserved by Postgres). It never contains braces or glob characters (Redis
 * hash tags, SCAN patterns) and fits a Postgres identifier.
 */
import type { StoreKind } from './types.js';

const NAMESPACE = /^[A-Za-z0-9_-]{1,53}$/;

export const NAMESPACE_RULE = 'use 1-53 of A-Z a-z 0-9 _ - (not starting with pg_)';

/** Why `ns` is not a valid namespace, or null when it is. */
export function namespaceProblem(ns: string): string | null {
  if (!NAMESPACE.test(ns) || ns.toLowerCase().startsWith('pg_')) {
    return `invalid store namespace ${JSON.stringify(ns)}: ${NAMESPACE_RULE}`;
  }
  return null;
}

/** The namespace a store uses when none is configured: Redis `fg`; Postgres, embedded and etcd `fencegate`. */
export function defaultNamespace(kind: StoreKind): string {
  return kind === 'redis' ? 'fg' : 'fencegate';
}
