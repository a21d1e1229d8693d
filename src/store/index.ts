/**
 * Opens the store named by a --store value: `redis://…`/`rediss://…`, `postgres://…`/
 * `postgresql://…`, or else a directory for the embedded store.
 */
import type { Store, StoreOptions } from './types.js';

export type { Store, StoreOptions } from './types.js';

export function storeKindOf(spec: string): 'redis' | 'postgres' | 'embedded' {
  if (/^rediss?:\/\//i.test(spec)) return 'redis';
  if (/^postgres(ql)?:\/\//i.test(spec)) return 'postgres';
  return 'embedded';
}

export async function openStore(spec: string, options: StoreOptions = {}): Promise<Store> {
  switch (storeKindOf(spec)) {
    case 'redis': {
      const { openRedisStore } = await import('./redis/store.js');
      return openRedisStore(spec, options);
    }
    case 'postgres': {
      const { openPostgresStore } = await import('./sql/store.js');
      return openPostgresStore(spec, options);
    }
    case 'embedded': {
      const { openEmbeddedStore } = await import('./sql/store.js');
      return openEmbeddedStore(spec, options);
    }
  }
}

/** A store spec safe to print: the password of a URL is masked. */
export function redactStoreSpec(spec: string): string {
  if (storeKindOf(spec) === 'embedded') return spec;
  try {
    const u = new URL(spec);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return spec.replace(/\/\/[^@/]*@/, '//***@');
  }
}
