/**
 * A private redis-server child process for the Redis store's own tests (outage,
 * durability check): never the shared Redis. Listens on 127.0.0.1 on a free port.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sleep } from './wait.js';

export async function freePort(): Promise<number> {
  const srv = createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const addr = srv.address();
  srv.close();
  await once(srv, 'close');
  if (addr === null || typeof addr === 'string') throw new Error('no port');
  return addr.port;
}

export interface RedisServer {
  url: string;
  port: number;
  /** Its data directory (AOF files when persistence is on). */
  dir: string;
  /** SIGKILL, wait for exit. */
  kill(): Promise<void>;
  /** Start again, same port and directory; with `args`, those in place of the extra arguments given at first. */
  start(args?: string[]): Promise<void>;
  /** SIGSTOP / SIGCONT: a Redis that holds connections open but answers nothing. */
  pause(): void;
  resume(): void;
  /** Kill and remove the data directory. */
  stop(): Promise<void>;
}

/**
 * Starts redis-server with no persistence (`--save '' --appendonly no`) followed by
 * `extraArgs`, which may override them (e.g. `--appendonly yes --appendfsync always`).
 */
export async function startRedisServer(extraArgs: string[] = []): Promise<RedisServer> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'fg-redis-test-'));
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'no',
  ];
  args.push('--daemonize', 'no');
  const base = [...args];
  args.push(...extraArgs);
  let proc: ChildProcess | null = null;

  const server: RedisServer = {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    async kill() {
      const p = proc;
      if (p === null || p.exitCode !== null || p.signalCode !== null) return;
      const exited = once(p, 'exit');
      p.kill('SIGKILL');
      await exited;
    },
    async start(override?: string[]) {
      const p = spawn('redis-server', override === undefined ? args : [...base, ...override], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      proc = p;
      let out = '';
      p.stdout?.on('data', (d: Buffer) => (out += d.toString()));
      p.stderr?.on('data', (d: Buffer) => (out += d.toString()));
      const end = Date.now() + 10_000;
      while (!out.includes('Ready to accept connections')) {
        if (p.exitCode !== null) throw new Error(`redis-server exited: ${out}`);
        if (Date.now() > end) throw new Error(`redis-server did not start: ${out}`);
        await sleep(20);
      }
    },
    pause() {
      proc?.kill('SIGSTOP');
    },
    resume() {
      proc?.kill('SIGCONT');
    },
    async stop() {
      server.resume();
      await server.kill();
      await rm(dir, { recursive: true, force: true });
    },
  };
  await server.start();
  return server;
}
