#!/usr/bin/env node
/**
 * What one write costs, counted rather than timed, for comparing builds on a noisy host
 * (bench/RESULTS.md, "What limits it"): for each build and mode, interleaved over rounds,
 * a fencegate process on a private Redis (AOF appendfsync always) takes `writes` PUTs
 * (after as many again to warm up) from 8 connections, and the run reports per write:
 * the gateway's and redis-server's CPU (/proc), Redis commands (INFO commandstats, the
 * commands run inside scripts included), Redis socket reads (INFO stats
 * total_reads_processed: how well the gateway batches), and with --gc-trace the young
 * generation scavenges per 1 000 writes at a 1 MiB semi-space (a stable measure of the
 * bytes allocated per write).
 *
 *   node bench/per-write.mjs [--builds DIR,DIR] [--modes fenced,open,stale]
 *                            [--heaps fast,compact] [--writes 6000] [--rounds 2] [--gc-trace]
 *
 * A build is a checkout with dist/ built (default: this one). Modes: fenced (admitted
 * writes, 16 locks), open (an unfenced route), stale (writes whose token was superseded).
 * With --heaps, the gateway is started as the installed command is (bin/fencegate.js run
 * by sh), once per FENCEGATE_HEAP value, instead of with this script's own Node flags.
 */
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { Pool } from 'undici';
import {
  control,
  durableRedisArgs,
  freePort,
  LISTENING,
  REDIS_READY,
  serveArgs,
  spawnUntil,
} from './lib.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const { values: opt } = parseArgs({
  options: {
    builds: { type: 'string', default: ROOT },
    modes: { type: 'string', default: 'fenced,open,stale' },
    writes: { type: 'string', default: '6000' },
    rounds: { type: 'string', default: '2' },
    'gc-trace': { type: 'boolean', default: false },
    heaps: { type: 'string' },
  },
});
const BUILDS = opt.builds.split(',').map((b) => resolve(b));
const MODES = opt.modes.split(',');
const HEAPS = opt.heaps === undefined ? [null] : opt.heaps.split(',');
const WRITES = Number(opt.writes);
const ROUNDS = Number(opt.rounds);
const LOCKS = 16;
const CONNECTIONS = 8;
const children = [];

const start = (cmd, args, pattern) => spawnUntil(cmd, args, pattern, { children });

async function cpuUs(pid) {
  const t = await readFile(`/proc/${pid}/stat`, 'utf8');
  const f = t.slice(t.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10_000;
}

/** Kernel-side counters of a process: system CPU (µs), read and write system calls. */
async function kernelCounters(pid) {
  const t = await readFile(`/proc/${pid}/stat`, 'utf8');
  const f = t.slice(t.lastIndexOf(')') + 2).split(' ');
  const io = await readFile(`/proc/${pid}/io`, 'utf8');
  const n = (k) => Number(new RegExp(`${k}: ([0-9]+)`).exec(io)[1]);
  return { sys: Number(f[12]) * 10_000, syscalls: n('syscr') + n('syscw') };
}

/** Admitted writes and those that joined an admission hold, from the gateway's /metrics. */
async function holdCounters(ctl) {
  const text = await (await fetch(`${ctl}/metrics`)).text();
  const sum = (name) => {
    let n = 0;
    for (const m of text.matchAll(new RegExp(`^${name}\\{[^}]*\\} ([0-9.e+]+)$`, 'gm'))) n += Number(m[1]);
    return n;
  };
  return { admitted: sum('fencegate_admitted_writes_total'), held: sum('fencegate_held_admissions_total') };
}

async function redisCounters(redis) {
  let commands = 0;
  for (const line of (await redis.info('commandstats')).split('\n')) {
    const m = /^cmdstat_([^:]+):calls=([0-9]+)/.exec(line.trim());
    if (m && m[1] !== 'info') commands += Number(m[2]);
  }
  const reads = Number(/total_reads_processed:([0-9]+)/.exec(await redis.info('stats'))[1]);
  return { commands, reads };
}

/** PUTs from CONNECTIONS loops; returns the answers that were not `want`. */
async function load(pool, count, paths, tokens, want) {
  const body = JSON.stringify({ status: 'shipped', note: 'x'.repeat(64) });
  let i = 0;
  let bad = 0;
  const loop = async () => {
    while (i < count) {
      const k = i++ % LOCKS;
      const headers = { 'content-type': 'application/json' };
      if (tokens !== null) headers['fencing-token'] = tokens[k];
      const res = await pool.request({ method: 'PUT', path: paths[k], headers, body });
      await res.body.dump();
      if (res.statusCode !== want) bad++;
    }
  };
  await Promise.all(Array.from({ length: CONNECTIONS }, loop));
  return bad;
}

/** The process's resident memory, MiB. */
async function rssMiB(pid) {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+([0-9]+) kB/.exec(status)[1]) / 1024;
}

function gatewayCommand(build, env, heap) {
  const args = serveArgs(env.store, env.policies);
  // The installed command: its first line (read by sh) picks Node's flags for FENCEGATE_HEAP.
  if (heap !== null)
    return { cmd: join(build, 'bin/fencegate.js'), args, env: { ...process.env, FENCEGATE_HEAP: heap } };
  // As bin/fencegate.js: no pretenuring; the single-threaded collector on 2 CPUs or fewer.
  const nodeArgs = opt['gc-trace']
    ? ['--max-semi-space-size=1', '--min-semi-space-size=1', '--trace-gc', '--no-allocation-site-pretenuring']
    : [
        '--max-semi-space-size=32',
        '--no-allocation-site-pretenuring',
        ...(availableParallelism() <= 2 ? ['--single-threaded-gc'] : []),
      ];
  if (process.env.FG_GATEWAY_NODE_ARGS)
    nodeArgs.push(...process.env.FG_GATEWAY_NODE_ARGS.split(' ').filter(Boolean));
  return {
    cmd: process.execPath,
    args: [...nodeArgs, join(build, 'bin/fencegate.js'), ...args],
    env: process.env,
  };
}

async function measure(build, mode, env, heap) {
  const command = gatewayCommand(build, env, heap);
  const gw = await spawnUntil(command.cmd, command.args, LISTENING, { children, env: command.env });
  const [data, ctl] = [gw.m[1], gw.m[2]];
  const tag = Math.random().toString(36).slice(2, 8);
  const base = { fenced: 'orders', open: 'open', stale: 'stale' }[mode];
  const prefix = mode === 'stale' ? 'stale' : 'order';
  const ids = Array.from({ length: LOCKS }, (_, i) => `${tag}${i}`);
  const paths = ids.map((id) => `/${base}/${id}`);
  const pool = new Pool(data, { connections: CONNECTIONS });
  let tokens = null;
  if (mode !== 'open') {
    const acquire = (id) =>
      control(ctl, `/v1/locks/${encodeURIComponent(`${prefix}:${id}`)}/acquire`, {
        owner: 'bench',
        ttlMs: 3_600_000,
      });
    const leases = [];
    for (const id of ids) leases.push(await acquire(id));
    tokens = leases.map((l) => l.token);
    if (mode === 'stale') {
      for (const l of leases)
        await control(ctl, `/v1/locks/${encodeURIComponent(l.key)}/release`, { leaseId: l.leaseId });
      for (let i = 0; i < LOCKS; i++) {
        const next = await acquire(ids[i]);
        const res = await pool.request({
          method: 'PUT',
          path: paths[i],
          headers: { 'fencing-token': next.token },
          body: 'x',
        });
        await res.body.dump();
      }
    }
  }
  const want = mode === 'stale' ? 409 : 200;
  await load(pool, WRITES, paths, tokens, want); // warm-up
  const scavengesBefore = (gw.output().match(/Scavenge/g) ?? []).length;
  const before = {
    ...(await kernelCounters(gw.child.pid)),
    gw: await cpuUs(gw.child.pid),
    redis: await cpuUs(env.redisPid),
    ...(await redisCounters(env.redis)),
    ...(await holdCounters(ctl)),
  };
  const started = performance.now();
  const bad = await load(pool, WRITES, paths, tokens, want);
  const ms = performance.now() - started;
  const after = {
    ...(await kernelCounters(gw.child.pid)),
    gw: await cpuUs(gw.child.pid),
    redis: await cpuUs(env.redisPid),
    ...(await redisCounters(env.redis)),
    ...(await holdCounters(ctl)),
  };
  const scavenges = (gw.output().match(/Scavenge/g) ?? []).length - scavengesBefore;
  const rss = await rssMiB(gw.child.pid);
  await pool.close();
  gw.child.kill('SIGTERM');
  await once(gw.child, 'exit');
  // FG_GATEWAY_OUTPUT=FILE keeps the gateway's output (e.g. with --trace-deopt in FG_GATEWAY_NODE_ARGS).
  if (process.env.FG_GATEWAY_OUTPUT)
    await writeFile(process.env.FG_GATEWAY_OUTPUT, gw.output(), { flag: 'a' });
  const per = (k) => (after[k] - before[k]) / WRITES;
  return {
    build: heap === null ? build : `${build} ${heap}`,
    mode,
    rps: Math.round((WRITES / ms) * 1000),
    bad,
    gwUs: per('gw'),
    gwSysUs: per('sys'),
    syscalls: per('syscalls'),
    redisUs: per('redis'),
    commands: per('commands'),
    reads: per('reads'),
    // Share of the admitted writes that joined a hold (the rest asked the store themselves).
    held:
      after.admitted > before.admitted
        ? (after.held - before.held) / (after.admitted - before.admitted)
        : null,
    scavenges: opt['gc-trace'] ? (scavenges * 1000) / WRITES : null,
    rss,
  };
}

async function main() {
  const tmp = await mkdtemp(join(tmpdir(), 'fg-per-write-'));
  const up = await start(process.execPath, [join(ROOT, 'bench/upstream.mjs')], /listening (\S+)/);
  const port = await freePort();
  await mkdir(join(tmp, 'redis'));
  const redisServer = await start(
    'redis-server',
    durableRedisArgs(port, join(tmp, 'redis'), process.env.FG_APPENDFSYNC ?? 'always'),
    REDIS_READY,
  );
  const policies = join(tmp, 'policies');
  await mkdir(policies);
  const route = (name, path, lock) =>
    `  - name: ${name}\n    methods: [PUT]\n    path: ${path}\n    upstream: bench\n` +
    (lock ? `    lock: "${lock}"\n` : '');
  await writeFile(
    join(policies, 'p.yaml'),
    `version: 1\nupstreams:\n  bench:\n    kind: http\n    url: ${up.m[1]}\n    timeoutMs: 10000\nroutes:\n` +
      route('fenced-writes', '/orders/:id', 'order:{id}') +
      route('open-writes', '/open/:id', null) +
      route('stale-writes', '/stale/:id', 'stale:{id}'),
  );
  const redis = new Redis(`redis://127.0.0.1:${port}`);
  const env = { store: `redis://127.0.0.1:${port}`, policies, redis, redisPid: redisServer.child.pid };
  const rows = [];
  for (let r = 0; r < ROUNDS; r++)
    for (const mode of MODES)
      for (const build of BUILDS)
        for (const heap of HEAPS) {
          const row = await measure(build, mode, env, heap);
          rows.push(row);
          process.stderr.write(`${JSON.stringify(row)}\n`);
        }
  redis.disconnect();
  const f = (v, d = 1) => (v === null ? '–' : v.toFixed(d));
  process.stdout.write(
    `| build | mode | writes/s | gateway µs | of which system | gateway reads+writes | redis µs | Redis commands | Redis reads | held | scavenges /1k | RSS after, MiB | bad |\n` +
      `|---|---|---|---|---|---|---|---|---|---|---|---|---|\n` +
      rows
        .map(
          (r) =>
            `| ${r.build} | ${r.mode} | ${r.rps} | ${f(r.gwUs)} | ${f(r.gwSysUs)} | ${f(r.syscalls, 2)} | ${f(r.redisUs)} | ${f(r.commands, 2)} | ${f(r.reads, 2)} | ${f(r.held, 3)} | ${f(r.scavenges)} | ${f(r.rss, 0)} | ${r.bad} |`,
        )
        .join('\n') +
      '\n',
  );
  await rm(tmp, { recursive: true, force: true });
}

main()
  .catch((err) => {
    process.stderr.write(`per-write failed: ${err.stack ?? err}\n`);
    process.exitCode = 1;
  })
  .finally(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
  });
