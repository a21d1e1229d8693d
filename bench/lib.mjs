/** Small helpers the bench scripts share. */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';

/** A TCP port free on 127.0.0.1 right now. */
export async function freePort() {
  const s = createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const { port } = s.address();
  s.close();
  return port;
}

/** POSTs JSON to a control API path; the parsed answer, or an error naming the status. */
export async function control(url, path, body) {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/**
 * `fencegate serve` arguments for a benchmark gateway: ports chosen by the system, and one
 * process (the default is one per CPU), so that the /proc counters and the resident memory
 * read from its pid are the whole gateway's. Followed by `extra` (a later flag wins).
 */
export function serveArgs(store, policies, extra = []) {
  return [
    'serve',
    '--store',
    store,
    '--policies',
    policies,
    '--listen',
    '127.0.0.1:0',
    '--control',
    '127.0.0.1:0',
    '--log-level',
    'error',
    '--workers',
    '1',
    ...extra,
  ];
}

/** The line a started gateway prints: its data and control URLs. */
export const LISTENING = /listening data=([^\s"]+) control=([^\s"]+)/;

/**
 * Starts `cmd` and waits until its output (stdout and stderr together) matches `pattern`.
 * Returns the child, the match and `output()` (everything it printed so far). The child is
 * pushed onto `children`, which the caller stops at the end. Throws when the child exits
 * first or `timeoutMs` passes. Other options go to `spawn` (cwd, env).
 */
export async function spawnUntil(cmd, args, pattern, { children, timeoutMs = 90_000, ...spawnOptions } = {}) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...spawnOptions });
  children?.push(child);
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const end = Date.now() + timeoutMs;
  let m;
  while (!(m = pattern.exec(out))) {
    if (child.exitCode !== null) throw new Error(`${cmd} ${args.join(' ')} exited: ${out}`);
    if (Date.now() > end) throw new Error(`${cmd} did not start: ${out}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return { child, m, output: () => out };
}

/** The line redis-server prints once it serves. */
export const REDIS_READY = /Ready to accept connections/;

/** redis-server arguments for a private durable Redis on loopback: AOF, fsync per write by default, no RDB. */
export function durableRedisArgs(port, dir, appendfsync = 'always') {
  return [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'yes',
  ].concat(['--appendfsync', appendfsync]);
}
