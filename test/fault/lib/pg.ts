/**
 * kill -9 of a throwaway Postgres cluster (test/helpers/sql-cluster.ts): SIGKILL the
 * postmaster and every child at once, as a crash of the whole server would, then wait
 * until they are gone. `cluster.start()` afterwards runs crash recovery from the WAL.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Cluster } from '../../helpers/sql-cluster.js';
import { sleep } from './workload.js';

const run = promisify(execFile);

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

export async function kill9Cluster(cluster: Cluster): Promise<void> {
  const main = Number(
    (readFileSync(join(cluster.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0] ?? '').trim(),
  );
  if (!Number.isInteger(main) || main <= 1) throw new Error('no postmaster pid');
  const children = await run('pgrep', ['-P', String(main)]).then(
    (r) => r.stdout.split('\n').filter(Boolean).map(Number),
    () => [] as number[],
  );
  const pids = [main, ...children];
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
  for (let i = 0; i < 200 && pids.some(alive); i++) await sleep(50);
  if (pids.some(alive))
    throw new Error(`postgres processes survived SIGKILL: ${pids.filter(alive).join(' ')}`);
}
