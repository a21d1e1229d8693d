/**
 * Test-only access to an etcd store's records, bypassing the store: puts a key's issued
 * counter where grants alone would take ages to reach (above 2^53, next to 2^63-1), as
 * embedded-seed.ts does for the embedded store (the records are the same, JSON in etcd).
 */
import { Etcd3 } from 'etcd3';
import type { LockRec } from '../../src/store/lmdb/db.js';
import { recordKey } from '../../src/store/etcd/keys.js';
import { parseEtcdSpec } from '../../src/store/etcd/spec.js';
import { seededLock } from './embedded-seed.js';

export async function seedEtcdIssued(spec: string, ns: string, key: string, token: bigint): Promise<void> {
  const parsed = parseEtcdSpec(spec);
  if (typeof parsed === 'string') throw new Error(parsed);
  const client = new Etcd3({ hosts: parsed.hosts });
  try {
    const at = recordKey(ns, 'locks', key);
    const raw = await client.get(at).string();
    const rec = seededLock(raw === null ? undefined : (JSON.parse(raw) as LockRec), token);
    await client.put(at).value(JSON.stringify(rec));
  } finally {
    client.close();
  }
}

/** Deletes every key of a namespace (a test's records). */
export async function deleteEtcdNamespace(spec: string, ns: string): Promise<void> {
  const parsed = parseEtcdSpec(spec);
  if (typeof parsed === 'string') throw new Error(parsed);
  const client = new Etcd3({ hosts: parsed.hosts });
  try {
    await client.delete().prefix(`${ns}/`);
  } finally {
    client.close();
  }
}
