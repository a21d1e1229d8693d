/**
 * A throwaway 3-member etcd cluster for the etcd rows (Debian's etcd-server; members on
 * free loopback ports, data in the run's temporary directory, fsync on as in production).
 * Returns the --store value and the member processes (stopped with the run's children).
 */
import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { children, sleep } from './core.mjs';

async function freePort() {
  const srv = createServer().listen(0, '127.0.0.1');
  await new Promise((r) => srv.once('listening', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

export async function startEtcd(tmp) {
  const members = [];
  for (let i = 0; i < 3; i++) {
    members.push({
      name: `b${i}`,
      client: await freePort(),
      peer: await freePort(),
      dir: join(tmp, `etcd-${i}`),
    });
  }
  const initial = members.map((m) => `${m.name}=http://127.0.0.1:${m.peer}`).join(',');
  const procs = [];
  for (const m of members) {
    await mkdir(m.dir, { recursive: true });
    const child = spawn(
      'etcd',
      [
        '--name', m.name, '--data-dir', m.dir,
        '--listen-client-urls', `http://127.0.0.1:${m.client}`, '--advertise-client-urls', `http://127.0.0.1:${m.client}`,
        '--listen-peer-urls', `http://127.0.0.1:${m.peer}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${m.peer}`,
        '--initial-cluster', initial, '--initial-cluster-state', 'new', '--log-level', 'error',
      ], // prettier-ignore
      { stdio: 'ignore' },
    );
    children.push(child);
    procs.push(child);
  }
  for (const m of members) {
    for (let i = 0; ; i++) {
      const res = await fetch(`http://127.0.0.1:${m.client}/v3/maintenance/status`, {
        method: 'POST',
        body: '{}',
      }).catch(() => null);
      const status = res?.ok ? await res.json() : null;
      if (status?.leader && status.leader !== '0') break;
      if (i > 300) throw new Error('etcd cluster did not start');
      await sleep(100);
    }
  }
  return { spec: `etcd://${members.map((m) => `127.0.0.1:${m.client}`).join(',')}`, procs };
}
