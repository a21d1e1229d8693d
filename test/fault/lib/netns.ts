/**
 * A private network namespace joined to the root namespace by a veth pair on a
 * private /30 of our own, for cutting the wire between a gateway (root namespace)
 * and a store (inside the namespace). Needs root (CAP_NET_ADMIN) and iproute2.
 *
 * Only the namespace, the veth pair and its two addresses are created and touched;
 * they are removed by destroy(), at process exit or on SIGINT/SIGTERM/SIGHUP if a test
 * could not, and by the next run's sweep (sweepDeadNetns) if the process was SIGKILLed.
 * Setup errors are thrown, never skipped: a sandbox that cannot do this fails loudly.
 */
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { appendFile, chown, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { tempDir } from '../../helpers/procs.js';
import { binDir } from '../../helpers/sql-cluster.js';
import { sleep } from './workload.js';

const run = promisify(execFile);
const ip = (...args: string[]) => run('ip', args);

export interface NetNs {
  name: string;
  /** veth end in the root namespace, and its address. */
  hostIf: string;
  hostAddr: string;
  /** veth end inside the namespace, and its address (where the store listens). */
  nsIf: string;
  nsAddr: string;
  /** Take the root end of the link down: packets to nsAddr have no route. */
  cut(): Promise<void>;
  restore(): Promise<void>;
  /** Spawn a command inside the namespace. */
  spawn(cmd: string, args: string[]): ChildProcess;
  destroy(): Promise<void>;
}

// The trap: whatever a test forgot, or if the worker exits or is told to stop, the
// processes started in a namespace are killed and the namespace and link removed.
const live = new Map<string, { hostIf: string; procs: Set<ChildProcess> }>();
function cleanupSync(): void {
  for (const [name, { hostIf, procs }] of live) {
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    for (const args of [
      ['link', 'del', hostIf],
      ['netns', 'del', name],
    ]) {
      try {
        execFileSync('ip', args, { stdio: 'ignore' });
      } catch {
        /* gone */
      }
    }
  }
  live.clear();
}
process.once('exit', cleanupSync);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(sig, () => {
    cleanupSync();
    process.kill(process.pid, sig); // the default action, now that our handler is gone
  });
}

async function pickSubnet(): Promise<[string, string]> {
  const used =
    (await ip('-4', '-o', 'addr', 'show')).stdout + (await ip('-4', 'route', 'show', 'table', 'all')).stdout;
  for (let i = 0; i < 50; i++) {
    const b = 200 + ((randomBytes(1)[0] as number) % 50);
    const c = randomBytes(1)[0] as number;
    const d = ((randomBytes(1)[0] as number) % 64) * 4;
    const prefix = `10.${b}.${c}.`;
    if (used.includes(prefix)) continue; // never near an address or route that exists
    return [`${prefix}${d + 1}`, `${prefix}${d + 2}`];
  }
  throw new Error('no free private /30 found');
}

const pidAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code === 'EPERM';
  }
};

/**
 * Leftovers of runs whose process is gone (a worker killed with SIGKILL cannot run its
 * trap): namespaces named `fgtest-<pid>-<id>` whose pid is dead. Their processes are
 * killed (`ip netns pids`), then the link `fgh<id>` and the namespace are removed.
 * Namespaces of live runs, and anything not named by this file, are left alone.
 */
export async function sweepDeadNetns(): Promise<string[]> {
  const swept: string[] = [];
  const list = (await ip('netns', 'list')).stdout;
  for (const m of list.matchAll(/^fgtest-(\d+)-([0-9a-f]{6})\b/gm)) {
    const [name, pid, id] = [m[0], Number(m[1]), m[2] as string];
    if (pid === process.pid || pidAlive(pid)) continue;
    const pids = (await ip('netns', 'pids', name).catch(() => ({ stdout: '' }))).stdout
      .split('\n')
      .filter(Boolean);
    for (const p of pids) {
      try {
        process.kill(Number(p), 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await ip('link', 'del', `fgh${id}`).catch(() => undefined);
    await ip('netns', 'del', name).catch(() => undefined);
    swept.push(name);
  }
  return swept;
}

export async function createNetns(): Promise<NetNs> {
  await sweepDeadNetns();
  const id = randomBytes(3).toString('hex');
  const name = `fgtest-${process.pid}-${id}`;
  const hostIf = `fgh${id}`;
  const nsIf = `fgn${id}`;
  const [hostAddr, nsAddr] = await pickSubnet();
  await ip('netns', 'add', name);
  const procs = new Set<ChildProcess>();
  live.set(name, { hostIf, procs });
  const ns: NetNs = {
    name,
    hostIf,
    hostAddr,
    nsIf,
    nsAddr,
    cut: async () => {
      await ip('link', 'set', hostIf, 'down');
    },
    restore: async () => {
      await ip('link', 'set', hostIf, 'up');
      // the connected route comes back with the link; wait until it is usable
      for (let i = 0; i < 100; i++) {
        const r = await ip('-4', 'route', 'get', nsAddr).catch(() => ({ stdout: '' }));
        if (r.stdout.includes(hostIf)) return;
        await sleep(50);
      }
      throw new Error(`route to ${nsAddr} did not come back`);
    },
    spawn: (cmd, args) => {
      const p = spawn('ip', ['netns', 'exec', name, cmd, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
      procs.add(p);
      return p;
    },
    destroy: async () => {
      for (const p of procs) {
        if (p.exitCode === null && p.signalCode === null) {
          p.kill('SIGKILL');
          await once(p, 'exit');
        }
      }
      await ip('link', 'del', hostIf).catch(() => undefined); // deletes the peer too
      await ip('netns', 'del', name).catch(() => undefined);
      live.delete(name);
    },
  };
  try {
    await ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf);
    await ip('link', 'set', nsIf, 'netns', name);
    await ip('addr', 'add', `${hostAddr}/30`, 'dev', hostIf);
    await ip('link', 'set', hostIf, 'up');
    await ip('netns', 'exec', name, 'ip', 'addr', 'add', `${nsAddr}/30`, 'dev', nsIf);
    await ip('netns', 'exec', name, 'ip', 'link', 'set', nsIf, 'up');
    await ip('netns', 'exec', name, 'ip', 'link', 'set', 'lo', 'up');
  } catch (err) {
    await ns.destroy();
    throw err;
  }
  return ns;
}

/**
 * Waits (50 ms steps, at most `steps`) until `proc`'s output matches `ready`; if it exits
 * or never gets there, `stop()` cleans up and the error carries the output.
 */
async function startedOrStopped(
  proc: ChildProcess,
  ready: RegExp,
  what: string,
  steps: number,
  stop: () => Promise<void>,
): Promise<void> {
  let out = '';
  proc.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  for (let i = 0; !ready.test(out); i++) {
    if (proc.exitCode !== null || i > steps) {
      await stop();
      throw new Error(`${what} ${proc.exitCode !== null ? 'exited' : 'did not start'}: ${out}`);
    }
    await sleep(50);
  }
}

/** A store server running inside a namespace. */
export interface NsStore {
  url: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** A durable redis-server (AOF appendfsync always) listening on the namespace's address only. */
export async function startRedisIn(ns: NetNs, port = 6379): Promise<NsStore> {
  const dir = await tempDir('fg-nsredis-');
  const proc = ns.spawn('redis-server', [
    '--port',
    String(port),
    '--bind',
    ns.nsAddr,
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'yes',
    '--appendfsync',
    'always',
    '--daemonize',
    'no',
    // Reached from the root namespace, not loopback: protected mode would refuse it. It
    // listens only on the namespace's own /30 address, which nothing else can route to.
    '--protected-mode',
    'no',
  ]);
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL');
      await once(proc, 'exit');
    }
    await rm(dir, { recursive: true, force: true });
  };
  await startedOrStopped(proc, /Ready to accept connections/, `redis-server in ${ns.name}`, 200, stop);
  return { url: `redis://${ns.nsAddr}:${port}`, proc, stop };
}

/**
 * A throwaway Postgres cluster (initdb in a temporary directory, as the `postgres` user
 * when we are root) whose postmaster runs in the foreground inside the namespace,
 * listening on the namespace's address only; pg_hba trusts the root end of the veth.
 */
export async function startPostgresIn(ns: NetNs, port = 5432): Promise<NsStore> {
  const bin = binDir();
  const dir = await tempDir('fg-nspg-');
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
    const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
    await chown(dir, uid, gid);
  }
  const asPostgres = (cmd: string, args: string[]): [string, string[]] =>
    asRoot ? ['runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args]] : [join(bin, cmd), args];
  const data = join(dir, 'data');
  const [initdb, initArgs] = asPostgres('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync']);
  await run(initdb, [...initArgs, '-E', 'UTF8']);
  await appendFile(join(data, 'pg_hba.conf'), `host all all ${ns.hostAddr}/32 trust\n`);
  const [cmd, args] = asPostgres('postgres', [
    '-D',
    data,
    '-p',
    String(port),
    '-k',
    dir,
    '-c',
    `listen_addresses=${ns.nsAddr}`,
    '-c',
    'fsync=off',
  ]);
  const proc = ns.spawn(cmd, args);
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      // SIGQUIT: immediate shutdown of the postmaster and its children (runuser passes it on).
      proc.kill('SIGQUIT');
      await Promise.race([once(proc, 'exit'), sleep(10_000)]);
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    }
    await rm(dir, { recursive: true, force: true });
  };
  await startedOrStopped(proc, /ready to accept connections/, `postgres in ${ns.name}`, 400, stop);
  return { url: `postgres://postgres@${ns.nsAddr}:${port}/postgres`, proc, stop };
}
