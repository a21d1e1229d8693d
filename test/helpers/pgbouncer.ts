/**
 * A private PgBouncer (Debian's `pgbouncer`) in front of the shared Postgres, in
 * transaction mode: its config in a temp directory, on a free port, any user let in
 * (auth_type any) and logged in to Postgres as `postgres`. A missing binary fails the
 * test (CI installs it: .ci/run).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './redis-server.js';
import { sleep } from './wait.js';

export interface PgBouncer {
  /** postgres://…@127.0.0.1:<port>/test through the pooler. */
  url: string;
  /** What it logged (stderr), for failure messages. */
  log(): string;
  stop(): Promise<void>;
}

export async function startPgBouncer(
  options: { poolSize?: number; database?: string } = {},
): Promise<PgBouncer> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'fg-pgbouncer-'));
  const ini = join(dir, 'pgbouncer.ini');
  await writeFile(
    ini,
    [
      '[databases]',
      '* = host=127.0.0.1 port=5432 user=postgres',
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'auth_type = any',
      'pool_mode = transaction',
      `default_pool_size = ${options.poolSize ?? 2}`,
      'max_client_conn = 200',
      'unix_socket_dir =',
      '',
    ].join('\n'),
  );
  // PgBouncer refuses to run as root; it reads its config before it drops to `nobody`.
  const asRoot = process.getuid?.() === 0;
  const proc: ChildProcess = spawn('pgbouncer', [...(asRoot ? ['-u', 'nobody'] : []), ini], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  proc.stderr?.on('data', (d: Buffer) => (log += d.toString()));
  const spawned = new Promise<void>((resolve, reject) => {
    proc.once('error', reject);
    proc.once('spawn', resolve);
  });
  await spawned;
  const end = Date.now() + 10_000;
  while (!(await listening(port))) {
    if (proc.exitCode !== null) throw new Error(`pgbouncer exited: ${log}`);
    if (Date.now() > end) throw new Error(`pgbouncer did not listen on ${port}: ${log}`);
    await sleep(50);
  }
  return {
    url: `postgres://fencegate@127.0.0.1:${port}/${options.database ?? 'test'}`,
    log: () => log,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        const exited = once(proc, 'exit');
        proc.kill('SIGTERM');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
