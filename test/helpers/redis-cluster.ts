/**
 * A private Redis Cluster for the Redis store's cluster tests: 3 primaries and a replica
 * each (redis-server in cluster mode, created with `redis-cli --cluster create`), on free
 * loopback ports at most 55535 (each node's cluster bus listens on its port + 10000), each
 * node with its own data directory, AOF with `appendfsync always` as the store's
 * durability check demands. Killed and removed when the test process exits (or by stop()),
 * and by a watchdog when the test process is killed. Never the shared Redis.
 *
 * cluster-node-timeout is 1 s so a test that kills a primary sees its replica promoted
 * within a few seconds; cluster-replica-validity-factor 0 lets any replica take over.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { sleep } from './wait.js';

const run = promisify(execFile);

/** tmpfs when there is one: the tests kill processes (the page cache keeps their writes), not machines. */
const DATA_ROOT = existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
export const NODE_TIMEOUT_MS = 1000;

export interface ClusterNode {
  port: number;
  dir: string;
  proc: ChildProcess | null;
  output: string;
}

export interface RedisClusterInfo {
  /** Node id, role, and the node id of its primary (replicas). */
  id: string;
  port: number;
  role: 'master' | 'slave';
  masterId: string | null;
  failed: boolean;
}

export interface RedisCluster {
  nodes: ClusterNode[];
  /** The --store value: `redis+cluster://127.0.0.1:a,127.0.0.1:b,…` (every node). */
  spec: string;
  /** CLUSTER NODES as seen by a live node. */
  topology(): Promise<RedisClusterInfo[]>;
  /** The node that serves `slot` as primary. */
  primaryOfSlot(slot: number): Promise<ClusterNode>;
  /** SIGKILL one node and wait for its exit. */
  kill(node: ClusterNode): Promise<void>;
  /** Start a killed node again on its port and data (it rejoins, as a replica if it was replaced). */
  start(node: ClusterNode): Promise<void>;
  /** Until every live node reports cluster_state:ok and the given number of primaries. */
  waitOk(timeoutMs?: number): Promise<void>;
  /** A plain connection to one node (the caller disconnects it). */
  connect(node: ClusterNode): Promise<Redis>;
  stop(): void;
}

async function portFree(port: number): Promise<boolean> {
  const srv = createServer();
  return new Promise((resolve) => {
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/** A free port p ≤ 55535 whose bus port p + 10000 is free too. */
async function freeClusterPort(taken: Set<number>): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const p = 20000 + Math.floor(Math.random() * 35535);
    if (taken.has(p) || taken.has(p + 10000) || taken.has(p - 10000)) continue;
    if ((await portFree(p)) && (await portFree(p + 10000))) {
      taken.add(p);
      return p;
    }
  }
  throw new Error('no free port pair for a cluster node');
}

function args(n: ClusterNode): string[] {
  return [
    '--port', String(n.port),
    '--bind', '127.0.0.1',
    '--dir', n.dir,
    '--daemonize', 'no',
    '--save', '',
    '--appendonly', 'yes',
    '--appendfsync', 'always',
    '--maxmemory-policy', 'noeviction',
    '--cluster-enabled', 'yes',
    '--cluster-config-file', 'nodes.conf',
    '--cluster-node-timeout', String(NODE_TIMEOUT_MS),
    '--cluster-replica-validity-factor', '0',
    '--cluster-require-full-coverage', 'yes',
    '--logfile', '',
  ]; // prettier-ignore
}

/**
 * A SIGKILLed test process runs no handler: a detached shell kills its node (recognised by
 * its data directory in its command line, never a reused pid) and removes its data once
 * the test process is gone; it leaves quietly when the node ends first.
 */
function watchdog(pid: number | undefined, dir: string): void {
  if (pid === undefined) return;
  const mine = `grep -qF '${dir}' /proc/${pid}/cmdline 2>/dev/null`;
  const script = `while kill -0 ${process.pid} 2>/dev/null && ${mine}; do sleep 2; done; kill -0 ${process.pid} 2>/dev/null && exit 0; ${mine} && kill -9 ${pid}; rm -rf '${dir}'`;
  spawn('sh', ['-c', script], { detached: true, stdio: 'ignore' }).unref();
}

async function spawnNode(n: ClusterNode): Promise<void> {
  n.output = '';
  const p = spawn('redis-server', args(n), { stdio: ['ignore', 'pipe', 'pipe'] });
  p.stdout?.on('data', (d: Buffer) => (n.output += d.toString()));
  p.stderr?.on('data', (d: Buffer) => (n.output += d.toString()));
  n.proc = p;
  watchdog(p.pid, n.dir);
  const end = Date.now() + 10_000;
  while (!n.output.includes('Ready to accept connections')) {
    if (p.exitCode !== null) throw new Error(`redis-server :${n.port} exited: ${n.output}`);
    if (Date.now() > end) throw new Error(`redis-server :${n.port} did not start: ${n.output}`);
    await sleep(20);
  }
}

const alive = (n: ClusterNode) => n.proc !== null && n.proc.exitCode === null && n.proc.signalCode === null;

async function withNode<T>(n: ClusterNode, fn: (r: Redis) => Promise<T>): Promise<T> {
  const r = new Redis({
    port: n.port,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    retryStrategy: () => null,
  });
  r.on('error', () => undefined);
  await r.connect();
  try {
    return await fn(r);
  } finally {
    r.disconnect();
  }
}

function parseNodes(text: string): RedisClusterInfo[] {
  return text
    .trim()
    .split('\n')
    .map((line) => {
      const [id = '', addr = '', flags = '', master = '-'] = line.split(' ');
      const port = Number(/:(\d+)@/.exec(addr)?.[1] ?? 0);
      const f = flags.split(',');
      return {
        id,
        port,
        role: f.includes('master') ? ('master' as const) : ('slave' as const),
        masterId: master === '-' ? null : master,
        failed: f.includes('fail') || f.includes('fail?'),
      };
    });
}

export async function startRedisCluster(primaries = 3, replicas = 1): Promise<RedisCluster> {
  const taken = new Set<number>();
  const nodes: ClusterNode[] = [];
  for (let i = 0; i < primaries * (1 + replicas); i++) {
    nodes.push({
      port: await freeClusterPort(taken),
      dir: mkdtempSync(join(DATA_ROOT, `fg-rcluster-${i}-`)),
      proc: null,
      output: '',
    });
  }
  const stop = () => {
    for (const n of nodes) {
      n.proc?.kill('SIGKILL');
      rmSync(n.dir, { recursive: true, force: true });
    }
  };
  process.once('exit', stop);
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    process.once(signal, () => {
      stop();
      process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGTERM' ? 15 : 1));
    });
  }
  try {
    for (const n of nodes) await spawnNode(n);
    await run(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...nodes.map((n) => `127.0.0.1:${n.port}`),
        '--cluster-replicas',
        String(replicas),
        '--cluster-yes',
      ],
      { timeout: 60_000 },
    );
  } catch (err) {
    stop();
    throw err;
  }

  const cluster: RedisCluster = {
    nodes,
    spec: `redis+cluster://${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`,
    async topology() {
      for (const n of nodes) {
        if (!alive(n)) continue;
        try {
          return parseNodes(String(await withNode(n, (r) => r.call('CLUSTER', 'NODES'))));
        } catch {
          // try the next node
        }
      }
      throw new Error('no live cluster node answers');
    },
    async primaryOfSlot(slot) {
      for (const n of nodes) {
        if (!alive(n)) continue;
        const slots = (await withNode(n, (r) => r.call('CLUSTER', 'SLOTS'))) as [
          number,
          number,
          [string, number],
        ][];
        for (const [from, to, [, port]] of slots) {
          const owner = nodes.find((o) => o.port === Number(port));
          if (slot >= from && slot <= to && owner !== undefined) return owner;
        }
      }
      throw new Error(`no primary for slot ${slot}`);
    },
    async kill(n) {
      const p = n.proc;
      if (p === null || !alive(n)) return;
      const exited = once(p, 'exit');
      p.kill('SIGKILL');
      await exited;
    },
    start: (n) => spawnNode(n),
    async waitOk(timeoutMs = 30_000) {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const live = nodes.filter(alive);
        const states = await Promise.all(
          live.map((n) =>
            withNode(n, async (r) => {
              const info = String(await r.call('CLUSTER', 'INFO'));
              const nodesText = String(await r.call('CLUSTER', 'NODES'));
              const masters = parseNodes(nodesText).filter((x) => x.role === 'master' && !x.failed);
              return /cluster_state:ok/.test(info) && masters.length === primaries;
            }).catch(() => false),
          ),
        );
        if (states.every(Boolean)) return;
        if (Date.now() > end)
          throw new Error(`redis cluster not ok: ${nodes.map((n) => n.output).join('\n')}`);
        await sleep(100);
      }
    },
    connect: async (n) => {
      const r = new Redis({ port: n.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 });
      r.on('error', () => undefined);
      await r.connect();
      return r;
    },
    stop,
  };
  await cluster.waitOk(60_000);
  return cluster;
}

let shared: Promise<RedisCluster> | null = null;

/**
 * One cluster per test process (vitest runs each file in its own), started on first use
 * and removed when the process exits; tests keep apart by namespace (a key prefix).
 */
export function sharedRedisCluster(): Promise<RedisCluster> {
  shared ??= startRedisCluster();
  return shared;
}
