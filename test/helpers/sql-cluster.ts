/**
 * A throwaway Postgres cluster of our own (never the shared one), on a free port
 * and a temporary directory, that tests may stop, pause and start at will.
 * initdb refuses to run as root, so as root it runs as the `postgres` user.
 */
import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './procs.js';

const run = promisify(execFile);

/** The directory of the installed Postgres server binaries (initdb, pg_ctl, postgres). */
export function binDir(): string {
  for (const v of ['17', '16', '15', '14']) {
    const dir = `/usr/lib/postgresql/${v}/bin`;
    if (existsSync(join(dir, 'initdb'))) return dir;
  }
  throw new Error('no Postgres server binaries found under /usr/lib/postgresql/*/bin (initdb, pg_ctl)');
}

export interface Cluster {
  url: string;
  port: number;
  dir: string;
  start(): Promise<void>;
  /** pg_ctl stop -m immediate: like a crash, connections drop at once. */
  stop(): Promise<void>;
  /** SIGSTOP / SIGCONT every process of the cluster: a hung server, not a refused one. */
  pause(): Promise<void>;
  resume(): Promise<void>;
  destroy(): Promise<void>;
}

/**
 * `env` is added to the server's environment (e.g. libfaketime, to move its clock);
 * `settings` are more `-c name=value` server settings (e.g. ssl=on and its files).
 */
export async function startCluster(
  env: NodeJS.ProcessEnv = {},
  settings: Record<string, string> = {},
): Promise<Cluster> {
  const bin = binDir();
  const asRoot = process.getuid?.() === 0;
  const options = { env: { ...process.env, ...env } };
  const exec = (cmd: string, args: string[]) =>
    asRoot
      ? run('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args], options)
      : run(join(bin, cmd), args, options);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'fg-pgcluster-'));
  if (asRoot) {
    const ids = await run('id', ['-u', 'postgres']);
    const gid = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(ids.stdout.trim()), Number(gid.stdout.trim()));
  }
  const data = join(dir, 'data');
  await exec('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
  const extra = Object.entries(settings)
    .map(([k, v]) => ` -c ${k}=${v}`)
    .join('');
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off${extra}`;
  const signalAll = async (sig: 'STOP' | 'CONT'): Promise<void> => {
    const main = (readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0] ?? '').trim();
    const children = await run('pgrep', ['-P', main]).then(
      (r) => r.stdout.split('\n').filter(Boolean),
      () => [],
    );
    await run('kill', [`-${sig}`, main, ...children]);
  };
  const c: Cluster = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    async start() {
      await exec('pg_ctl', ['-D', data, '-o', opts, '-l', join(dir, 'log'), '-w', '-t', '30', 'start']);
    },
    async stop() {
      await exec('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
    },
    pause: () => signalAll('STOP'),
    resume: () => signalAll('CONT'),
    async destroy() {
      await c.resume().catch(() => undefined);
      await c.stop().catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await c.start();
  return c;
}
