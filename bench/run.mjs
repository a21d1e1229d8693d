#!/usr/bin/env node
/**
 * `npm run bench`: side by side in one run, on the same upstream and machine:
 *   direct upstream · bare @fastify/http-proxy · fencegate unfenced route ·
 *   fencegate fenced writes on the embedded, Postgres and Redis stores, on Redis
 *   with `check: sequencer` (signed sequencers verified per write, cached), on Redis
 *   with `--admission-hold-ms 0` (every write asks the store, docs/adr/0016), and on Redis
 *   with `serve --workers 2` (every other row runs one process);
 * then latency at half the bare proxy's saturation rate (bare vs fenced on Redis), and
 * the gateway's resident memory over 60 s of fenced writes at saturation on every store; and
 * `kind: postgres` row writes
 * against a raw node-postgres UPDATE loop (bench/postgres-kind.mjs).
 * Prints a table and writes bench/RESULTS.md. Loopback only; every run is bounded.
 *
 * Load generators (both separate processes, so that neither shares an event loop or a heap
 * with the other's bookkeeping, and both with their CPU per request measured from /proc):
 *   - saturation rows: wrk (bench/wrk.mjs, bench/wrk-put.lua; `apt-get install wrk`), as
 *     issue 13 measured: 2 threads, 32 connections, closed loop, each lock's Fencing-Token,
 *     every answer's status checked; then the bare proxy and the Redis process's fenced,
 *     unfenced and stale writes again in turns (BENCH_TURNS rounds of BENCH_TURN_SECONDS,
 *     order rotated), which is where the ratio goals are read: rows measured minutes apart
 *     on this shared host moved the fenced ratio between 0.51 and 0.84 for the same build;
 *   - latency rows: bench/paced.mjs, open loop (latency from when each request was due, so no
 *     coordinated omission), in its own process, with its own event-loop delay and send lag
 *     reported beside the figures; the setups (direct upstream, bare proxy, fenced Redis) take
 *     turns in short slices so that the shared host's swings hit them alike, and the host's CPU
 *     pressure (/proc/pressure/cpu) over each setup's slices is reported (bench/latency.mjs).
 *     Measured before this method: the in-process generator, after two minutes of autocannon
 *     in the same process, gave the bare proxy a p99 of 47.7 ms at half its saturation rate;
 *     the same generator in a fresh process 11–17 ms with its own event-loop delay p99 at
 *     2.4–3.4 ms, and 27–164 ms while other tenants loaded the host (CPU pressure 40–90 %):
 *     the p99 of one row measured alone is mostly the machine, hence the interleaving.
 *
 *   node bench/run.mjs [--only GROUP,GROUP]
 *
 * The runner (this file) parses the arguments, starts the upstream and writes the policy,
 * runs the rows of bench/rows/ in order (each a module: { name, groups | when, run(ctx) →
 * the saturation table's rows it measured }, its other figures in ctx.r; shared processes in
 * ctx), stops what they share, and prints bench/report.mjs's text (and writes bench/RESULTS.md).
 * Settings and measuring helpers are in bench/core.mjs. A new row is one module in bench/rows/
 * (its run(ctx) returns its table rows), listed in ROWS with its group added to GROUPS; a
 * section of its own in the report goes in bench/report.mjs, read from ctx.r.
 *
 * --only runs some rows and prints them without writing bench/RESULTS.md. Groups: direct,
 * embedded (its unfenced and fenced rows), postgres, etcd (a 3-member cluster: fenced, fenced with
 * every write asking the store, and two gateway processes at once against one), rediscluster (a
 * 3-primary Redis Cluster: fenced, and two gateway processes at once), redis (fenced and unfenced on the Redis
 * process), stale, sequencer, workers, latency (also measures the fenced Redis row: the second
 * rate is half of it; stale and workers do too, for their ratios), soak, pgkind, lockmem (gateway RSS after 10k and 200k distinct locks). The bare proxy
 * is always measured (every ratio's reference).
 *
 * Env: BENCH_SECONDS (saturation runs, default 10), BENCH_LATENCY_SECONDS (each latency
 *      setup's total, default 40),
 *      BENCH_WARMUP_SECONDS (before each saturation row, default 5),
 *      BENCH_TURNS (default 16), BENCH_TURN_SECONDS (default 3), BENCH_SOAK_SECONDS (default 60), BENCH_CONNECTIONS (default 32), BENCH_WRK_THREADS
 *      (default 2), BENCH_LATENCY_SLICES (default 20), BENCH_GENERATOR_CPUS (pin the paced
 *      generator with taskset, e.g. "1"; default unpinned: pinned to CPU 1 beside unpinned
 *      servers, interleaved at 1 500 req/s, the bare proxy's slice p99s were 16–102 ms against
 *      7–18 ms unpinned, as the servers lose a core's worth of the scheduler's choice).
 */
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { requireWrk } from './wrk.mjs';
import { children, ROOT, rssKiB, start, stop, withCpu } from './core.mjs';
import { report } from './report.mjs';
import bareProxy from './rows/bare-proxy.mjs';
import direct from './rows/direct.mjs';
import embedded from './rows/embedded.mjs';
import etcd from './rows/etcd.mjs';
import latency from './rows/latency.mjs';
import lockMemory from './rows/lock-memory.mjs';
import pgKind from './rows/pg-kind.mjs';
import postgres from './rows/postgres.mjs';
import redisFenced from './rows/redis-fenced.mjs';
import redisCluster from './rows/redis-cluster.mjs';
import redisProcess from './rows/redis-process.mjs';
import redisUnfenced from './rows/redis-unfenced.mjs';
import sequencer from './rows/sequencer.mjs';
import soak from './rows/soak.mjs';
import stale from './rows/stale.mjs';
import turns from './rows/turns.mjs';
import workers from './rows/workers.mjs';

/** The rows in the order they run (their table rows print in this order). */
const ROWS = [
  direct,
  bareProxy,
  embedded,
  postgres,
  etcd,
  redisCluster,
  redisProcess,
  redisFenced,
  redisUnfenced,
  stale,
  turns,
  sequencer,
  workers,
  latency,
  soak,
];
/** Rows run after the shared gateways and the bare proxy have stopped. */
const LATE_ROWS = [pgKind, lockMemory];

const GROUPS = [
  'direct',
  'embedded',
  'postgres',
  'etcd',
  'rediscluster',
  'redis',
  'stale',
  'sequencer',
  'workers',
  'latency',
  'soak',
  'pgkind',
  'lockmem',
];
const { values: opt } = parseArgs({ options: { only: { type: 'string' } } });
const ONLY = opt.only === undefined ? null : new Set(opt.only.split(','));
for (const g of ONLY ?? []) {
  if (!GROUPS.includes(g)) throw new Error(`--only: unknown group ${g} (groups: ${GROUPS.join(', ')})`);
}
const want = (group) => ONLY === null || ONLY.has(group);
/** A row runs when one of its groups is wanted (`groups: null`: always), or as its `when` says. */
const wanted = (row) => (row.when ? row.when(want) : row.groups === null || row.groups.some(want));

/** The bench's policy: fenced, open, stale and sequenced routes to the upstream. */
const policy = (upstream, lockPrefix) => `version: 1
upstreams:
  bench:
    kind: http
    url: ${upstream}
    timeoutMs: 10000
routes:
  - name: fenced-writes
    methods: [PUT]
    path: /orders/:id
    upstream: bench
    lock: "${lockPrefix}:{id}"
  - name: open-writes
    methods: [PUT]
    path: /open/:id
    upstream: bench
  - name: stale-writes
    methods: [PUT]
    path: /stale/:id
    upstream: bench
    lock: "stale:{id}"
  - name: sequenced-writes
    methods: [PUT]
    path: /sequenced/:id
    upstream: bench
    lock: "sequenced:{id}"
    fencing: { check: sequencer }
`;

async function main() {
  requireWrk();
  const started = new Date();
  const tmp = await mkdtemp(join(tmpdir(), 'fg-bench-'));
  const say = (s) => process.stdout.write(`${s}\n`);

  const { m: um, child: upstreamChild } = await start(
    process.execPath,
    ['bench/upstream.mjs'],
    /listening (\S+)/,
  );
  const upstream = um[1];
  const policyDir = join(tmp, 'policies');
  await mkdir(policyDir);
  await writeFile(join(policyDir, 'bench.yaml'), policy(upstream, 'order'));

  /** What the rows share: the run's processes and paths, and `r`, the report's figures. */
  const ctx = {
    tmp,
    say,
    want,
    upstream,
    upstreamChild,
    policyDir,
    // The Postgres rows' throwaway schema on the shared server.
    schema: `fgbench_${Date.now()}`,
    // CPU per request, per process (µs, from /proc): the proxy under test, its store, the upstream, wrk.
    cpuOf: (proxy, store = null, opts = {}) =>
      withCpu({ proxy, store, upstream: upstreamChild.pid }, opts.run),
    /** A gateway row's result with the gateway's resident memory right after it. */
    withRss: async (row, pid) => Object.assign(row, { rssMiB: (await rssKiB(pid)) / 1024 }),
    r: { started, only: ONLY, staleCommands: [], soaks: [] },
  };
  const results = [];
  for (const row of ROWS) if (wanted(row)) results.push(...(await row.run(ctx)));
  await ctx.gen?.close();
  if (ctx.redis) await stop(ctx.redis.child);
  await stop(ctx.bare.child);
  for (const row of LATE_ROWS) if (wanted(row)) results.push(...(await row.run(ctx)));

  const md = report({ ...ctx.r, results });
  if (ONLY === null) {
    // A hand-written "What limits it" section (profile findings) is carried over to the new results.
    const previous = await readFile(join(ROOT, 'bench', 'RESULTS.md'), 'utf8').catch(() => '');
    const notesAt = previous.indexOf('\n## What limits it');
    const notes = notesAt < 0 ? '' : previous.slice(notesAt);
    await writeFile(join(ROOT, 'bench', 'RESULTS.md'), md + notes);
  }
  process.stdout.write(`\n${md}`);
  await rm(tmp, { recursive: true, force: true });
}

main()
  .catch((err) => {
    process.stderr.write(`bench failed: ${err.stack ?? err}\n`);
    process.exitCode = 1;
  })
  .finally(async () => {
    for (const c of children) await stop(c).catch(() => {});
  });
