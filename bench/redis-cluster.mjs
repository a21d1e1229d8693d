/**
 * A throwaway Redis Cluster for the redis-cluster rows: 3 primaries, no replicas (a
 * benchmark measures the write path, not a failover), each redis-server in cluster mode on
 * a free loopback port at most 55535 (its bus on port + 10000), AOF `appendfsync always`
 * in the run's temporary directory as in production, created with `redis-cli --cluster
 * create`. Returns the --store value and the node processes (stopped with the run's children).
 */
import { execFile } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { durableRedisArgs, REDIS_READY } from './lib.mjs';
import { sleep, start } from './core.mjs';

const run = promisify(execFile);

function portFree(port) {
  const srv = createServer();
  return new Promise((resolve) => {
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

async function clusterPort(taken) {
  for (let i = 0; i < 200; i++) {
    const p = 20000 + Math.floor(Math.random() * 35535);
    if ([p, p + 10000, p - 10000].some((q) => taken.has(q))) continue;
    if ((await portFree(p)) && (await portFree(p + 10000))) {
      taken.add(p);
      return p;
    }
  }
  throw new Error('no free port pair for a cluster node');
}

export async function startRedisCluster(tmp, primaries = 3) {
  const taken = new Set();
  const ports = [];
  const procs = [];
  for (let i = 0; i < primaries; i++) {
    const port = await clusterPort(taken);
    const dir = join(tmp, `redis-cluster-${i}`);
    await mkdir(dir, { recursive: true });
    const args = durableRedisArgs(port, dir).concat([
      '--maxmemory-policy', 'noeviction',
      '--cluster-enabled', 'yes',
      '--cluster-config-file', 'nodes.conf',
      '--cluster-node-timeout', '5000',
    ]); // prettier-ignore
    const { child } = await start('redis-server', args, REDIS_READY);
    procs.push(child);
    ports.push(port);
  }
  await run('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-yes'], {
    timeout: 60_000,
  });
  for (const p of ports) {
    for (let i = 0; ; i++) {
      const { stdout } = await run('redis-cli', ['-p', String(p), 'cluster', 'info']);
      if (/cluster_state:ok/.test(stdout)) break;
      if (i > 300) throw new Error('redis cluster did not become ok');
      await sleep(100);
    }
  }
  return { spec: `redis+cluster://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`, procs };
}
