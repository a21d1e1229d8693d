/**
 * The etcd store's epoch record (`<namespace>/meta/epoch`, docs/adr/0002-epoch-floors.md):
 * created with the namespace, raised by `epoch bump` and by the identity check
 * (identity.ts), and stamped with the cluster id it was verified on, so a process that
 * opens the namespace on another cluster (restored into a new one) raises it too.
 */
import { randomUUID } from 'node:crypto';
import type { EpochRec } from '../lmdb/db.js';
import { epochFloor, maxBig, type Outcome } from '../lmdb/locks.js';
import type { Snapshot } from './snapshot.js';

/** The format of the etcd store's records; bumped when an older fencegate could not read them. */
export const ETCD_FORMAT = '1';

export interface EtcdEpoch extends EpochRec {
  /** The etcd cluster id the epoch was verified on. */
  cluster?: string;
}

export function readEpoch(snap: Snapshot): EtcdEpoch | undefined {
  return snap.meta.get('epoch') as EtcdEpoch | undefined;
}

/** A new epoch whose floor is at least the clock × 1000, the old floor and `atLeast`. */
export function raiseEpoch(
  snap: Snapshot,
  now: number,
  cluster: string | null,
  atLeast = 0n,
): Outcome<EtcdEpoch> {
  const floor = maxBig(maxBig(epochFloor(snap), BigInt(now) * 1000n), atLeast);
  const epoch: EtcdEpoch = { id: randomUUID(), floor: floor.toString(), startedAt: now };
  if (cluster !== null) epoch.cluster = cluster;
  snap.meta.put('epoch', epoch);
  return { result: epoch, notify: [] };
}

/**
 * At open: the format record and the epoch, created when missing; an epoch verified on
 * another cluster is raised. Null when `mustExist` and the namespace was never used.
 */
export function initEpoch(
  snap: Snapshot,
  now: number,
  cluster: string,
  mustExist: boolean,
): Outcome<string | null> {
  const format = snap.meta.get('format') as string | undefined;
  if (format === undefined && mustExist) return { result: null, notify: [] };
  if (format === undefined) snap.meta.put('format', ETCD_FORMAT);
  const epoch = readEpoch(snap);
  if (epoch === undefined || epoch.cluster !== cluster) raiseEpoch(snap, now, cluster);
  return { result: format ?? ETCD_FORMAT, notify: [] };
}
