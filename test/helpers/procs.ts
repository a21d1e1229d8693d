/**
 * Real processes for tests: a private redis-server, and the built fencegate CLI.
 * Everything listens on loopback, on ports the OS picks, and is killed after.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { freePort, startRedisServer, type RedisServer } from './redis-server.js';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep } from './wait.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const BIN = join(ROOT, 'bin', 'fencegate.js');

export { freePort };

export interface RedisProcess extends RedisServer {
  /** Kill and start again on the same port and directory (data kept only if persistence was on). */
  restart(): Promise<void>;
}

/** A private redis-server (never the shared one). `durable` turns on AOF appendfsync always. */
export async function startRedis(options: { durable?: boolean } = {}): Promise<RedisProcess> {
  const server = await startRedisServer(
    options.durable ? ['--appendonly', 'yes', '--appendfsync', 'always'] : [],
  );
  return Object.assign(server, {
    async restart() {
      await server.kill();
      await server.start();
    },
  });
}

/** One pino log line: level (number), time, msg, and the line's own fields. */
export type LogLine = { level: number; msg: string } & Record<string, unknown>;

/** The lines of `text` that are JSON objects (log lines), parsed. */
export function parseLogLines(text: string): LogLine[] {
  const lines: LogLine[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(line) as LogLine);
    } catch {
      // a line still being written
    }
  }
  return lines;
}

export interface FencegateProcess {
  proc: ChildProcess;
  data: string;
  control: string;
  output(): string;
  /** The JSON log lines printed so far (stdout and stderr lines that parse as objects). */
  logs(): LogLine[];
  /** SIGTERM and wait for a clean exit; returns the exit code. */
  stop(): Promise<number | null>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Runs `fencegate serve` from the build (npm test builds first) with port-0 listeners.
 * The start-up allowance is long: on a loaded 2-core machine (load average 20 seen)
 * even a plain start can take seconds.
 *
 * One process unless the test says otherwise (`--workers N` in `args`, or
 * FENCEGATE_WORKERS in `env`): a FencegateProcess stands for one gateway process, whose
 * breakers, session and SIGSTOP the scenarios reason about; test/e2e/workers.test.ts and
 * the workers cases of the fault suite run several. FENCEGATE_TEST_WORKERS (e.g. `auto`)
 * runs every such process with that many workers instead, to try a suite with them.
 */
export async function startFencegate(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  startTimeoutMs = 120_000,
  cwd = ROOT,
): Promise<FencegateProcess> {
  const proc = spawn(
    process.execPath,
    [BIN, 'serve', '--listen', '127.0.0.1:0', '--control', '127.0.0.1:0', '--log-level', 'warn', ...args],
    {
      cwd,
      env: { ...process.env, FENCEGATE_WORKERS: process.env.FENCEGATE_TEST_WORKERS ?? '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  proc.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const end = Date.now() + startTimeoutMs;
  let m: RegExpExecArray | null;
  // The lifecycle log line; in JSON its msg is followed by a quote.
  while (!(m = /listening data=([^\s"]+) control=([^\s"]+)/.exec(out))) {
    if (proc.exitCode !== null) throw new Error(`fencegate exited ${proc.exitCode}: ${out}`);
    if (Date.now() > end) {
      proc.kill('SIGKILL');
      throw new Error(`fencegate did not start: ${out}`);
    }
    await sleep(20);
  }
  return {
    proc,
    data: m[1] as string,
    control: m[2] as string,
    output: () => out,
    logs: () => parseLogLines(out),
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill('SIGTERM');
      const [code] = (await once(proc, 'exit')) as [number | null];
      return code;
    },
    async kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill(signal);
      await once(proc, 'exit');
    },
  };
}

/** Runs the CLI to completion and returns its exit code and output. */
export async function runCli(args: string[], env: NodeJS.ProcessEnv = {}, cwd = ROOT) {
  const proc = spawn(process.execPath, [BIN, ...args], { cwd, env: { ...process.env, ...env } });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const [code] = (await once(proc, 'exit')) as [number | null];
  return { code, stdout, stderr };
}

export async function tempDir(prefix: string): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}
