/**
 * A private 3-member etcd cluster (Debian's etcd-server, 3.4) for the etcd store's
 * tests: members on free loopback ports, each with its own temporary data directory,
 * killed and removed when the test process exits (or by stop()). Never a shared etcd.
 *
 * Elections are quick (heartbeat 50 ms, election timeout 500 ms) so a test that kills
 * the leader sees a new one within a second or two.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { freePort } from './redis-server.js';
import type { TestCerts } from './tls-certs.js';
import { sleep } from './wait.js';

/**
 * Data directories on tmpfs when there is one: the tests check fencegate's logic and kill
 * processes (whose writes the page cache keeps), not machines, and the members' fsyncs on
 * a disk shared with the rest of the suite made the store tests several times slower.
 */
const DATA_ROOT = existsSync('/dev/shm') ? '/dev/shm' : tmpdir();

export interface EtcdMember {
  name: string;
  /** http://127.0.0.1:port, or https:// for a cluster started with `tls`. */
  clientUrl: string;
  peerUrl: string;
  dir: string;
  proc: ChildProcess | null;
  output: string;
}

export interface EtcdCluster {
  members: EtcdMember[];
  /** The --store value naming every member: `etcd://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c` (etcds:// with tls). */
  spec: string;
  /** The member currently leading (asked through each member's JSON gateway). */
  leader(): Promise<EtcdMember>;
  /** SIGKILL one member and wait for its exit. */
  kill(member: EtcdMember): Promise<void>;
  /** SIGSTOP / SIGCONT: a member that keeps its sockets open and answers nothing. */
  pause(member: EtcdMember): void;
  resume(member: EtcdMember): void;
  /** Start a killed member again on its ports and data directory (it rejoins). */
  start(member: EtcdMember): Promise<void>;
  /**
   * Kill every member, empty their data directories and start a new cluster on the same
   * ports: all of etcd's state gone under running clients (its revision starts again).
   */
  wipe(): Promise<void>;
  /** Kill every member and remove their directories. */
  stop(): void;
}

interface StatusReply {
  header?: { member_id?: string };
  leader?: string;
}

/**
 * Clients over TLS: the members serve their client port with the test CA's server
 * certificate and, with `clientAuth`, refuse clients without a certificate from it
 * (etcd's --client-cert-auth). Peers talk plain HTTP among themselves.
 */
export interface EtcdTlsOptions {
  certs: TestCerts;
  clientAuth: boolean;
}

/** How the helper itself reaches the members' JSON gateway over TLS (CA and client certificate). */
const tlsAgents = new Map<string, Agent>();

function agentFor(m: EtcdMember): Agent | undefined {
  return tlsAgents.get(m.clientUrl);
}

/** The member's view of the cluster (POST /v3/maintenance/status on its JSON gateway), or null. */
async function status(m: EtcdMember): Promise<StatusReply | null> {
  try {
    const agent = agentFor(m);
    const res = await fetch(`${m.clientUrl}/v3/maintenance/status`, {
      method: 'POST',
      body: '{}',
      signal: AbortSignal.timeout(1000),
      ...(agent === undefined ? {} : { dispatcher: agent }),
    } as RequestInit);
    return res.ok ? ((await res.json()) as StatusReply) : null;
  } catch {
    return null;
  }
}

const memberTls = new Map<string, EtcdTlsOptions>();

function tlsArgs(m: EtcdMember): string[] {
  const tls = memberTls.get(m.name + m.dir);
  if (tls === undefined) return [];
  return [
    '--cert-file', tls.certs.dualUse.cert,
    '--key-file', tls.certs.dualUse.key,
    ...(tls.clientAuth ? ['--client-cert-auth', '--trusted-ca-file', tls.certs.ca.cert] : []),
  ]; // prettier-ignore
}

function args(m: EtcdMember, all: EtcdMember[], state: 'new' | 'existing'): string[] {
  return [
    ...tlsArgs(m),
    '--name', m.name,
    '--data-dir', m.dir,
    '--listen-client-urls', m.clientUrl,
    '--advertise-client-urls', m.clientUrl,
    '--listen-peer-urls', m.peerUrl,
    '--initial-advertise-peer-urls', m.peerUrl,
    '--initial-cluster', all.map((o) => `${o.name}=${o.peerUrl}`).join(','),
    '--initial-cluster-token', `fg-test-${process.pid}`,
    '--initial-cluster-state', state,
    '--heartbeat-interval', '50',
    '--election-timeout', '500',
    '--log-level', 'error',
  ]; // prettier-ignore
}

function spawnMember(m: EtcdMember, all: EtcdMember[], state: 'new' | 'existing'): void {
  m.output = '';
  const p = spawn('etcd', args(m, all, state), { stdio: ['ignore', 'pipe', 'pipe'] });
  p.stdout?.on('data', (d: Buffer) => (m.output += d.toString()));
  p.stderr?.on('data', (d: Buffer) => (m.output += d.toString()));
  m.proc = p;
  watchdog(p.pid, m.dir);
}

/**
 * A SIGKILLed test process runs no handler: a detached shell kills its member (recognised by
 * its data directory, never a reused pid) and removes its data once the test process is gone;
 * it leaves quietly when the member ends first (a test may start it again on the same data).
 */
function watchdog(pid: number | undefined, dir: string): void {
  if (pid === undefined) return;
  const mine = `grep -qF '${dir}' /proc/${pid}/cmdline 2>/dev/null`;
  const script = `while kill -0 ${process.pid} 2>/dev/null && ${mine}; do sleep 2; done; kill -0 ${process.pid} 2>/dev/null && exit 0; ${mine} && kill -9 ${pid}; rm -rf '${dir}'`;
  spawn('sh', ['-c', script], { detached: true, stdio: 'ignore' }).unref();
}

/** Until every given member answers its status with a leader known. */
async function ready(members: EtcdMember[], timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const answers = await Promise.all(members.map(status));
    if (answers.every((a) => a !== null && a.leader !== undefined && a.leader !== '0')) return;
    for (const m of members) {
      if (m.proc !== null && m.proc.exitCode !== null) throw new Error(`etcd ${m.name} exited: ${m.output}`);
    }
    if (Date.now() > end)
      throw new Error(`etcd cluster not ready: ${members.map((m) => m.output).join('\n')}`);
    await sleep(50);
  }
}

export async function startEtcdCluster(size = 3, tls?: EtcdTlsOptions): Promise<EtcdCluster> {
  const members: EtcdMember[] = [];
  for (let i = 0; i < size; i++) {
    const m: EtcdMember = {
      name: `m${i}`,
      clientUrl: `${tls === undefined ? 'http' : 'https'}://127.0.0.1:${await freePort()}`,
      peerUrl: `http://127.0.0.1:${await freePort()}`,
      dir: mkdtempSync(join(DATA_ROOT, `fg-etcd-m${i}-`)),
      proc: null,
      output: '',
    };
    if (tls !== undefined) {
      memberTls.set(m.name + m.dir, tls);
      const read = (f: string) => readFileSync(f);
      tlsAgents.set(
        m.clientUrl,
        new Agent({
          connect: {
            ca: read(tls.certs.ca.cert),
            ...(tls.clientAuth ? { cert: read(tls.certs.client.cert), key: read(tls.certs.client.key) } : {}),
          },
        }),
      );
    }
    members.push(m);
  }
  const stop = () => {
    for (const m of members) {
      m.proc?.kill('SIGKILL');
      rmSync(m.dir, { recursive: true, force: true });
    }
  };
  // Members are not children that die with the test process: stop them however it ends.
  process.once('exit', stop);
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    process.once(signal, () => {
      stop();
      process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGTERM' ? 15 : 1));
    });
  }
  for (const m of members) spawnMember(m, members, 'new');
  await ready(members);
  const cluster: EtcdCluster = {
    members,
    spec: `${tls === undefined ? 'etcd' : 'etcds'}://${members.map((m) => new URL(m.clientUrl).host).join(',')}`,
    async leader() {
      const end = Date.now() + 15_000;
      for (;;) {
        for (const m of members) {
          if (m.proc === null || m.proc.exitCode !== null || m.proc.signalCode !== null) continue;
          const s = await status(m);
          if (s !== null && s.leader !== undefined && s.leader === s.header?.member_id) return m;
        }
        if (Date.now() > end) throw new Error('no etcd leader');
        await sleep(50);
      }
    },
    async kill(m) {
      const p = m.proc;
      if (p === null || p.exitCode !== null || p.signalCode !== null) return;
      const exited = once(p, 'exit');
      p.kill('SIGKILL');
      await exited;
    },
    pause: (m) => void m.proc?.kill('SIGSTOP'),
    resume: (m) => void m.proc?.kill('SIGCONT'),
    async start(m) {
      spawnMember(m, members, 'existing');
      await ready([m]);
    },
    async wipe() {
      for (const m of members) await cluster.kill(m);
      for (const m of members) {
        rmSync(m.dir, { recursive: true, force: true });
        mkdirSync(m.dir);
      }
      for (const m of members) spawnMember(m, members, 'new');
      await ready(members);
    },
    stop,
  };
  return cluster;
}

let shared: Promise<EtcdCluster> | null = null;

/**
 * One cluster per test process (vitest runs each file in its own), started on first use
 * and removed when the process exits; tests keep apart by namespace (a key prefix).
 */
export function sharedEtcdCluster(): Promise<EtcdCluster> {
  shared ??= startEtcdCluster();
  return shared;
}
