#!/usr/bin/env node
/**
 * What a stale refusal costs the gateway's JavaScript, without the kernel and the load
 * generator (bench/RESULTS.md, "What limits it"): under wrk the refusal's own share is a
 * few µs of ~50, and the host's noise moves whole runs by more than that. Here a gateway
 * (a build's dist/, on a private Redis) runs in a child process; its data listener's
 * server is fed PUTs with superseded tokens through an in-memory socket, 8 in flight, the
 * next sent from a setImmediate (so the event loop's I/O turns run, as between reads), and
 * the child reports its CPU per refusal over runs of `--writes`: the least of `--runs`
 * is the figure to compare (the host's noise only ever adds). `--bare` measures a plain
 * node:http server answering the same 409 in the same harness: the floor that Node's HTTP
 * server sets (the gateway's refusals no longer pass through it: the refusal lane answers
 * them below it, docs/adr/0017-refusal-lane.md). Builds and the bare server take turns, one child per turn.
 *
 *   node bench/refusal-inproc.mjs [--builds DIR,DIR] [--bare] [--rounds 3] [--runs 11] [--writes 20000]
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Duplex } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { durableRedisArgs, freePort, REDIS_READY, spawnUntil } from './lib.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SELF = fileURLToPath(import.meta.url);
// As bin/fencegate.js starts Node by default on 2 CPUs (the compact heap).
const NODE_FLAGS = [
  '--max-semi-space-size=8',
  '--heap-growing-percent=20',
  '--no-allocation-site-pretenuring',
  '--single-threaded-gc',
];
const LOCKS = 16;
const IN_FLIGHT = 8;

const { values: opt } = parseArgs({
  options: {
    builds: { type: 'string', default: ROOT },
    bare: { type: 'boolean', default: false },
    rounds: { type: 'string', default: '3' },
    runs: { type: 'string', default: '11' },
    writes: { type: 'string', default: '20000' },
    child: { type: 'string' },
  },
});

async function parent() {
  const targets = opt.builds.split(',').map((b) => resolve(b));
  if (opt.bare) targets.push('bare');
  const seen = new Map(targets.map((t) => [t, []]));
  for (let round = 0; round < Number(opt.rounds); round++) {
    for (let i = 0; i < targets.length; i++) {
      const target = targets[(i + round) % targets.length];
      const proc = spawn(
        process.execPath,
        [...NODE_FLAGS, SELF, '--child', target, '--runs', opt.runs, '--writes', opt.writes],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      let out = '';
      proc.stdout.on('data', (d) => (out += d));
      const [code] = await once(proc, 'exit');
      if (code !== 0) throw new Error(`${target}: exit ${code}`);
      seen.get(target).push(...JSON.parse(out));
    }
  }
  for (const [target, us] of seen) {
    us.sort((a, b) => a - b);
    const at = (q) => us[Math.floor(q * (us.length - 1))].toFixed(2);
    console.log(
      `${target}: µs per refusal, least ${at(0)}, p25 ${at(0.25)}, median ${at(0.5)} (${us.length} runs)`,
    );
  }
}

/** One target: its server, its superseded tokens, then `runs` timed runs; prints their µs per refusal. */
async function child(target) {
  const children = [];
  const tmp = await mkdtemp(join(tmpdir(), 'fg-inproc-'));
  let close = async () => {};
  try {
    const { server, tokens } =
      target === 'bare' ? await bareServer() : await gateway(target, tmp, children, (c) => (close = c));
    const body = JSON.stringify({ status: 'shipped', note: 'x'.repeat(64) });
    const requests = tokens.map((token, i) =>
      Buffer.from(
        `PUT /stale/${i} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
          `Fencing-Token: ${token}\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      ),
    );
    const writes = Number(opt.writes);
    await run(server, requests, writes); // warm-up
    const us = [];
    for (let r = 0; r < Number(opt.runs); r++) {
      const before = process.cpuUsage();
      await run(server, requests, writes);
      const spent = process.cpuUsage(before);
      us.push((spent.user + spent.system) / writes);
    }
    process.stdout.write(JSON.stringify(us));
  } finally {
    await close();
    for (const c of children) c.kill('SIGKILL');
    await rm(tmp, { recursive: true, force: true });
  }
}

/** A socket in memory: what is pushed is the client's bytes, what the server writes goes to `onAnswer`. */
class MemorySocket extends Duplex {
  constructor(onAnswer) {
    super();
    this.onAnswer = onAnswer;
    this.remoteAddress = '127.0.0.1';
    this.remotePort = 40000;
  }
  _read() {}
  _write(chunk, _encoding, done) {
    this.onAnswer(chunk);
    done();
  }
  _writev(chunks, done) {
    for (const c of chunks) this.onAnswer(c.chunk);
    done();
  }
  setTimeout() {
    return this;
  }
  setNoDelay() {
    return this;
  }
  setKeepAlive() {
    return this;
  }
}

/** `writes` refusals over one connection, IN_FLIGHT pipelined; every answer must be a 409. */
function run(server, requests, writes) {
  return new Promise((done, fail) => {
    let sent = 0;
    let answered = 0;
    const socket = new MemorySocket((chunk) => {
      const head = typeof chunk === 'string' ? chunk : chunk.toString('latin1', 0, 12);
      if (!head.startsWith('HTTP/1.1 ')) return;
      if (!head.startsWith('HTTP/1.1 409')) fail(new Error(`answered ${head}`));
      answered++;
      if (sent < writes) {
        const next = requests[sent++ % requests.length];
        setImmediate(() => socket.push(next));
      }
      if (answered === writes) done();
    });
    server.emit('connection', socket);
    for (let k = 0; k < IN_FLIGHT; k++) socket.push(requests[sent++ % requests.length]);
  });
}

async function gateway(build, tmp, children, onClose) {
  const { startServer } = await import(pathToFileURL(join(build, 'dist/index.js')).href);
  const { resolveConfig } = await import(pathToFileURL(join(build, 'dist/config.js')).href);
  const port = await freePort();
  await mkdir(join(tmp, 'redis'));
  await spawnUntil('redis-server', durableRedisArgs(port, join(tmp, 'redis')), REDIS_READY, { children });
  await mkdir(join(tmp, 'policies'));
  await writeFile(
    join(tmp, 'policies/bench.yaml'),
    `version: 1
upstreams:
  bench: { kind: http, url: "http://127.0.0.1:9" }
routes:
  - { name: stale-writes, methods: [PUT], path: /stale/:id, upstream: bench, lock: "stale:{id}" }
`,
  );
  const config = resolveConfig({
    env: {},
    flags: {
      store: `redis://127.0.0.1:${port}`,
      policies: join(tmp, 'policies'),
      listen: '127.0.0.1:0',
      control: '127.0.0.1:0',
      logLevel: 'error',
      workers: 1,
    },
  });
  const running = await startServer(config);
  onClose(() => running.close());
  // The data listener's server: the gateway does not hand it out, node lists it among its handles.
  const dataPort = Number(new URL(running.data).port);
  const server = process
    ._getActiveHandles()
    .find((h) => h instanceof Server && h.address()?.port === dataPort);
  if (server === undefined) throw new Error('the data listener was not found');
  const post = async (path, body) => {
    const res = await fetch(`${running.control}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  const tokens = [];
  for (let i = 0; i < LOCKS; i++) {
    const key = encodeURIComponent(`stale:${i}`);
    const old = await post(`/v1/locks/${key}/acquire`, { owner: 'bench', ttlMs: 3_600_000 });
    await post(`/v1/locks/${key}/release`, { leaseId: old.leaseId });
    const next = await post(`/v1/locks/${key}/acquire`, { owner: 'bench', ttlMs: 3_600_000 });
    const res = await fetch(`${running.data}/stale/${i}`, {
      method: 'PUT',
      headers: { 'fencing-token': next.token },
      body: 'x',
    });
    if (res.status !== 502 && res.status !== 200) throw new Error(`superseding write: ${res.status}`);
    tokens.push(old.token);
  }
  return { server, tokens };
}

/** The same 409 (a problem+json of the same size) from a plain node:http server. */
async function bareServer() {
  const server = createServer({ keepAliveTimeout: 72_000 }, (req, res) => {
    const token = req.headers['fencing-token'];
    const lock = `stale:${req.url.slice('/stale/'.length)}`;
    const body = JSON.stringify({
      type: 'urn:fencegate:stale-token',
      title: 'The fencing token is older than one already admitted',
      status: 409,
      detail: `token ${token} is older than 1796218772595002, already admitted for lock "${lock}"`,
      lock,
      token,
      highest: '1796218772595002',
    });
    res.writeHead(409, {
      'content-type': 'application/problem+json',
      'content-length': Buffer.byteLength(body),
    });
    res.end(body);
  });
  return { server, tokens: Array.from({ length: LOCKS }, (_, i) => String(1796218772595001 - i * 1000)) };
}

if (opt.child !== undefined) await child(opt.child);
else await parent();
