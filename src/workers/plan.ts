/**
 * How many processes `fencegate serve` runs (docs/adr/0008-workers.md): `--workers N`,
 * or the CPUs available when not set. Every store may be opened by several processes at
 * once (the embedded one too: LMDB, docs/stores-embedded.md).
 */
import { availableParallelism } from 'node:os';
import type { ServeConfig } from '../config.js';

/** Data-listener processes; 1: everything in one process, no primary. */
export function workerCount(config: Readonly<Pick<ServeConfig, 'workers'>>): number {
  return config.workers ?? availableParallelism();
}
