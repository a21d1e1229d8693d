/**
 * The verification of a Redis Cluster (ADR 0019 on every primary, docs/adr/0021): the slot
 * map reloaded, then on each primary, over the connection the store's commands take, the
 * durability check, its role, run_id, whether it took over from another master
 * (master_replid2), its cluster node id and whether its marker key is there (a primary
 * that lost its data has none); then fg_epoch_verify_cluster_v1 on the
 * epoch's primary with all of them. The primaries are marked verified (the gate in
 * cluster.ts lets data commands through) only when none of their connections closed
 * meanwhile.
 */
import type { Redis } from 'ioredis';
import { StoreUnavailableError } from '../../errors.js';
import type { FencingToken } from '../../tokens.js';
import { type ClusterTopology, keySlot, nodeKey } from './cluster.js';
import { type Durability, checkDurability, infoField, RedisDurabilityError } from './durability.js';
import { parseEpochVerify } from './replies.js';
import { scriptSource } from './scripts.js';

export interface PrimaryCheck {
  node: Redis;
  generation: number;
  nodeId: string;
  runId: string;
  promoted: boolean;
  /** The node's marker key (in the lowest slot it serves), and whether it was there. */
  marker: string;
  marked: boolean;
  durability: Durability;
}

export interface ClusterVerified {
  id: string;
  floor: FencingToken;
  outcome: ReturnType<typeof parseEpochVerify>['outcome'];
  /** The primaries with their run_ids (node id -> run_id). */
  servers: Map<string, string>;
  promoted: string[];
  durability: Durability;
}

const TAGS = new Map<number, string>();

/** A hash tag whose slot is `slot` (found by trying `n0`, `n1`, …; cached). */
export function tagForSlot(slot: number): string {
  let tag = TAGS.get(slot);
  for (let i = 0; tag === undefined; i++) {
    if (keySlot(`{n${i}}`) === slot) tag = `n${i}`;
  }
  TAGS.set(slot, tag);
  return tag;
}

/** The marker key of a primary: in the lowest slot it serves, so it lives and dies with its data. */
function markerKey(topology: ClusterTopology, node: Redis, prefix: string): string {
  const slot = topology.lowestSlotOf(node);
  if (slot === undefined)
    throw new StoreUnavailableError(`redis store unavailable: ${nodeKey(node)} serves no slot`);
  return `${prefix}:node:{${tagForSlot(slot)}}`;
}

async function checkPrimary(
  topology: ClusterTopology,
  node: Redis,
  prefix: string,
  allowVolatile: boolean,
): Promise<PrimaryCheck> {
  const generation = topology.generation(node);
  const where = nodeKey(node);
  let durability: Durability;
  try {
    durability = await checkDurability(
      { client: node, where, lastError: () => null, topology: null },
      allowVolatile,
    );
  } catch (err) {
    if (!(err instanceof RedisDurabilityError)) throw err;
    throw new StoreUnavailableError(`redis store unavailable: ${err.message}`, { cause: err });
  }
  const runId = infoField(await node.info('server'), 'run_id');
  if (runId === null) throw new Error(`INFO server of ${where} has no run_id`);
  const replication = await node.info('replication');
  const role = infoField(replication, 'role');
  if (role !== 'master') {
    throw new StoreUnavailableError(
      `redis store unavailable: cluster node ${where} is a ${role ?? 'server of unknown role'}, not a primary`,
    );
  }
  const replid2 = infoField(replication, 'master_replid2');
  const nodeId = String(await node.cluster('MYID'));
  const marker = markerKey(topology, node, prefix);
  const marked = Number(await topology.raw(node, 'exists', [marker])) > 0;
  const promoted = replid2 !== null && !/^0+$/.test(replid2);
  return { node, generation, nodeId, runId, promoted, marker, marked, durability };
}

/** One line for every primary's durability: the first problem, or that all are durable. */
function combined(checks: PrimaryCheck[]): Durability {
  const weak = checks.find((c) => !c.durability.durable);
  if (weak !== undefined)
    return { durable: false, detail: `${nodeKey(weak.node)}: ${weak.durability.detail}` };
  return { durable: true, detail: `${checks.length} primaries, each ${checks[0]?.durability.detail ?? ''}` };
}

/**
 * Verifies every primary and the epoch record; `atLeast(checks)` is the floor to ask for
 * ('' for none), decided by the store from what it knew before.
 */
export async function verifyCluster(
  topology: ClusterTopology,
  prefix: string,
  epochKey: string,
  newId: string,
  allowVolatile: boolean,
  atLeast: (checks: PrimaryCheck[]) => string,
): Promise<ClusterVerified> {
  await topology.refresh();
  const primaries = topology.primaries();
  if (primaries.length === 0)
    throw new StoreUnavailableError('redis store unavailable: the cluster has no primary');
  const checks = await Promise.all(primaries.map((n) => checkPrimary(topology, n, prefix, allowVolatile)));
  const owner = topology.ownerOf(keySlot(epochKey));
  const epochNode = checks.find((c) => c.node === owner)?.node;
  if (epochNode === undefined) {
    throw new StoreUnavailableError(
      `redis store unavailable: no verified primary serves the slot of ${epochKey}`,
    );
  }
  const quads = checks.flatMap((c) => [c.nodeId, c.runId, c.promoted ? '1' : '0', c.marked ? '1' : '0']);
  const reply = await topology.raw(epochNode, 'eval', [
    scriptSource('fg_epoch_verify_cluster_v1'),
    1,
    epochKey,
    newId,
    atLeast(checks),
    ...quads,
  ]);
  const { id, floor, outcome } = parseEpochVerify(reply, 'fg_epoch_verify_cluster_v1');
  // Markers after the epoch record: a crash in between costs a spare new epoch, never a missed one.
  await Promise.all(checks.filter((c) => !c.marked).map((c) => topology.raw(c.node, 'set', [c.marker, '1'])));
  for (const c of checks) {
    if (!topology.markVerified(c.node, c.runId, c.generation)) {
      throw new StoreUnavailableError(
        `redis store unavailable: the connection to ${nodeKey(c.node)} was lost while it was verified`,
      );
    }
  }
  return {
    id,
    floor,
    outcome,
    servers: new Map(checks.map((c) => [c.nodeId, c.runId])),
    promoted: checks.filter((c) => c.promoted).map((c) => c.nodeId),
    durability: combined(checks),
  };
}
