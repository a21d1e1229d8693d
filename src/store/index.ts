/**
 * Opens the store named by a --store value: `redis://…`/`rediss://…`,
 * `redis+cluster://host:port,…` (Redis Cluster), `postgres://…`/`postgresql://…`,
 * `etcd://host:port,…`/`etcds://…`, or a plain directory path for the embedded store.
 * Anything that looks like another scheme (a typo) is refused: read as a directory, it
 * would silently give each gateway a fence of its own.
 */
import { parseEtcdSpec } from './etcd/spec.js';
import { parseClusterSpec } from './redis/cluster.js';
import { sslParamsProblem } from './sql/pg-ssl.js';
import type { Store, StoreOptions } from './types.js';

export type { Store, StoreOptions } from './types.js';

export const STORE_SCHEMES = [
  'redis://',
  'rediss://',
  'redis+cluster://',
  'rediss+cluster://',
  'postgres://',
  'postgresql://',
  'etcd://',
  'etcds://',
] as const;

/** A URL scheme at the start (`name:`), as opposed to a path. */
const SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*:/;

export function storeKindOf(spec: string): 'redis' | 'postgres' | 'etcd' | 'embedded' | null {
  if (/^rediss?(\+cluster)?:\/\//i.test(spec)) return 'redis';
  if (/^etcds?:\/\//i.test(spec)) return 'etcd';
  if (/^postgres(ql)?:\/\//i.test(spec)) return 'postgres';
  if (SCHEME.test(spec)) return null;
  return 'embedded';
}

/** Why `spec` names no store fencegate knows, or null when it does. */
export function checkStoreSpec(spec: string): string | null {
  if (spec.trim() === '') return 'the store must not be empty';
  const kind = storeKindOf(spec);
  if (kind === 'postgres') {
    const ssl = sslParamsProblem(spec);
    return ssl === null ? null : `"${redactStoreSpec(spec)}": ${ssl}`;
  }
  if (kind === 'redis' && /^rediss?\+cluster:/i.test(spec)) {
    const cluster = parseClusterSpec(spec);
    return typeof cluster === 'string' ? `"${redactStoreSpec(spec)}": ${cluster}` : null;
  }
  if (kind === 'etcd') {
    const etcd = parseEtcdSpec(spec);
    return typeof etcd === 'string' ? `"${redactStoreSpec(spec)}": ${etcd}` : null;
  }
  if (kind !== null) return null;
  const scheme = SCHEME.exec(spec)?.[0] ?? '';
  return (
    `"${redactStoreSpec(spec)}": unknown store scheme "${scheme}"; use ${STORE_SCHEMES.join(', ')} ` +
    `or a directory path for the embedded store (write ./${spec.replace(/^\/+/, '')} for a directory with a colon in its name)`
  );
}

export async function openStore(spec: string, options: StoreOptions = {}): Promise<Store> {
  const kind = storeKindOf(spec);
  if (kind === null) throw new RangeError(checkStoreSpec(spec) ?? 'unknown store');
  switch (kind) {
    case 'redis': {
      const { openRedisStore } = await import('./redis/store.js');
      return openRedisStore(spec, options);
    }
    case 'postgres': {
      const { openPostgresStore } = await import('./sql/store.js');
      return openPostgresStore(spec, options);
    }
    case 'etcd': {
      const { openEtcdStore } = await import('./etcd/store.js');
      return openEtcdStore(spec, options);
    }
    case 'embedded': {
      const { openEmbeddedStore } = await import('./lmdb/store.js');
      return openEmbeddedStore(spec, options);
    }
  }
}

/** A store spec safe to print: the password of a URL is masked. */
export function redactStoreSpec(spec: string): string {
  if (!SCHEME.test(spec)) return spec;
  try {
    const u = new URL(spec);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return spec.replace(/\/\/[^@/]*@/, '//***@');
  }
}
