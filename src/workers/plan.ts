/**
 * How many processes `fencegate serve` runs (docs/adr/0008-workers.md): `--workers N`,
 * or the CPUs available when not set; one whenever the store cannot be opened by
 * several processes at once (storeShareable).
 */
import { availableParallelism } from 'node:os';
import type { ServeConfig } from '../config.js';
import { storeKindOf, storeShareable } from '../store/index.js';

export interface WorkerPlan {
  /** Data-listener processes; 1: everything in one process, no primary. */
  count: number;
  /** Why fewer processes run than asked for (a start-up line), or null. */
  note: string | null;
  /** True when --workers (or its variable or key) asked for more than run: the note is a warning. */
  explicit: boolean;
}

export function workerPlan(config: Readonly<Pick<ServeConfig, 'workers' | 'store'>>): WorkerPlan {
  const explicit = config.workers !== null;
  const wanted = config.workers ?? availableParallelism();
  const kind = storeKindOf(config.store);
  if (wanted > 1 && kind !== null && !storeShareable(kind)) {
    return {
      count: 1,
      explicit,
      note:
        `workers: 1 (${explicit ? 'asked for' : 'CPUs available:'} ${wanted}): the ${kind} store is opened ` +
        'by one process only; use a Postgres or Redis store to serve from several processes',
    };
  }
  return { count: wanted, note: null, explicit };
}
