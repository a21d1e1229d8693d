/**
 * What bench/run.mjs and its rows (bench/rows/) share: the run's settings (env), the processes
 * it starts and stops, wrk runs with CPU per process from /proc, and the figures' arithmetic.
 */
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { wrk } from './wrk.mjs';
import { durableRedisArgs, LISTENING, REDIS_READY, serveArgs, spawnUntil } from './lib.mjs';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
// Before each measured row, the same load for this long: a fresh gateway's JIT is still
// compiling its request path after 2 s (the unfenced route, measured first on a new process,
// cost 46-71 % more CPU per request than on a process that had already served other rows).
export const WARMUP = Number(process.env.BENCH_WARMUP_SECONDS ?? 5);
export const SOAK = Number(process.env.BENCH_SOAK_SECONDS ?? 60);
// "Flat" for the memory goal: a leak of 25 bytes a write shows as more than this much growth
// between the two halves' lowest samples at ~8 000 writes/s; the sawtooth's troughs moved by
// 0.9-2.4 MiB over 60 s in runs without one.
export const SOAK_FLAT_MIB = 5;
export const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
export const WRK_THREADS = Number(process.env.BENCH_WRK_THREADS ?? 2);
// The latency goal compares two p99s of ~15-90 ms on this host, set by its dips: stretches of
// 100-300 ms in which every request is 15-90 ms late, whichever server runs (each setup alone
// for 30 s at 3 335 req/s: the bare proxy and fencegate both had them, fencegate's at no GC
// pause of its own over 3 ms). One dip makes 300-1 000 requests late; a setup's p99 over 20 s
// is its 667th-slowest request, so it was mostly how many dips landed on it (two runs 36 min
// apart: fencing added -125 ms, then +11.7 ms). 20 slices of 2 s spread the dips over the
// setups more evenly.
export const LATENCY_SLICES = Number(process.env.BENCH_LATENCY_SLICES ?? 20);
export const LATENCY_SECONDS = Number(process.env.BENCH_LATENCY_SECONDS ?? 40);
// The goals' ratios are read from the Redis setups measured in turns: this many rounds, each
// setup BENCH_TURN_SECONDS (default 3) per round, order rotated every round. The stale ratio
// of single rounds spans 2.4-4.5 here (the host's speed moves by 2x within a minute): 16
// rounds, not 8, so that the total is less a matter of which rounds were slow.
export const TURNS = Number(process.env.BENCH_TURNS ?? 16);
export const TURN_SECONDS = Number(process.env.BENCH_TURN_SECONDS ?? 3);
export const GENERATOR_CPUS = process.env.BENCH_GENERATOR_CPUS || null;
export const WRK_VERSION =
  /wrk (\S+)/.exec(spawnSync('wrk', ['-v'], { encoding: 'utf8' }).stdout ?? '')?.[1] ?? '?';
export const LOCKS = 16;
export const PG_URL = process.env.FENCEGATE_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';
export const children = [];
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export const start = (cmd, args, pattern, opts = {}) =>
  spawnUntil(cmd, args, pattern, { children, cwd: ROOT, ...opts });

export async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  await Promise.race([once(child, 'exit'), sleep(5000).then(() => child.kill('SIGKILL'))]);
}

export async function fencegate(store, policyDir, extra = [], env = {}) {
  // Run as the installed command is (bin/fencegate.js starts Node with its tuning flags).
  const { child, m } = await start(
    join(ROOT, 'bin/fencegate.js'),
    serveArgs(store, policyDir, extra),
    LISTENING,
    { env: { ...process.env, ...env } },
  );
  return { child, data: m[1], control: m[2] };
}

/** Drops a gateway's throwaway schema on the shared Postgres server. */
export async function dropSchema(name) {
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  await c.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`);
  await c.end();
}

export async function release(control, lease) {
  const res = await fetch(`${control}/v1/locks/${encodeURIComponent(lease.key)}/release`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ leaseId: lease.leaseId }),
  });
  if (res.status !== 200) throw new Error(`release failed: ${res.status} ${await res.text()}`);
}

export async function acquireTokens(control, prefix) {
  return (await acquireLeases(control, prefix)).map((l) => l.token);
}

/** One lease per lock, as the issuer answers it (token, and sequencer when keys are configured). */
export async function acquireLeases(control, prefix) {
  const leases = [];
  for (let i = 0; i < LOCKS; i++) {
    const res = await fetch(`${control}/v1/locks/${encodeURIComponent(`${prefix}:${i}`)}/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ owner: 'bench', ttlMs: 3_600_000 }),
    });
    if (res.status !== 200) throw new Error(`acquire failed: ${res.status} ${await res.text()}`);
    leases.push(await res.json());
  }
  return leases;
}

/** PUT /{base}/{i} rotating over LOCKS ids, with each lock's token (and sequencer) when given (wrk). */
export function run(
  url,
  { base = 'orders', tokens = null, sequencers = null, seconds = SECONDS, expect = 0 } = {},
) {
  return wrk(url, {
    base,
    tokens,
    sequencers,
    seconds,
    connections: CONNECTIONS,
    threads: WRK_THREADS,
    locks: LOCKS,
    expect,
  });
}

/** Least-squares slope of samples taken every `stepS` seconds, in units per minute. */
export function slopePerMinute(samples, stepS) {
  const n = samples.length;
  if (n < 2) return NaN;
  const xs = samples.map((_, i) => i * stepS);
  const mx = xs.reduce((a, b) => a + b, 0) / n;
  const my = samples.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += (xs[i] - mx) * (samples[i] - my);
    den += (xs[i] - mx) ** 2;
  }
  return (num / den) * 60;
}

export function summarize(name, measured, cpu = measured.cpu ?? {}) {
  const r = measured.result ?? measured;
  return { name, rps: r.rps, p50: r.p50, p99: r.p99, total: r.requests, bad: r.bad, cpu };
}

/**
 * The scale-out row: a second gateway on the same store, each driven by its own wrk at the
 * same time (after a warm-up together), their throughput summed. Stops the second gateway.
 */
export async function twoGateways(one, store, policyDir, tokens, name) {
  const two = await fencegate(store, policyDir);
  await Promise.all([run(one.data, { tokens, seconds: WARMUP }), run(two.data, { tokens, seconds: WARMUP })]);
  const [a, b] = await Promise.all([run(one.data, { tokens }), run(two.data, { tokens })]);
  await stop(two.child);
  return {
    name,
    rps: a.rps + b.rps,
    p50: Math.max(a.p50, b.p50),
    p99: Math.max(a.p99, b.p99),
    total: a.requests + b.requests,
    bad: a.bad + b.bad,
    cpu: {},
  };
}

export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * Setups measured in turns: TURNS rounds, each setup TURN_SECONDS per round, the order rotated
 * every round, so that the host's swings (this machine's throughput moves by ±20 % within
 * minutes with other tenants' load) hit every setup alike. A setup's figures are over all its
 * slices: requests over time, CPU per request; p50 the median slice's, p99 the largest.
 * Each result's `perRound` is its req/s in each round, for ratios of setups measured side by side.
 */
export async function inTurns(setups) {
  const acc = new Map(
    setups.map((s) => [s.name, { requests: 0, seconds: 0, bad: 0, cpu: {}, p50: [], p99: [], rps: [] }]),
  );
  for (let round = 0; round < TURNS; round++) {
    for (let k = 0; k < setups.length; k++) {
      const setup = setups[(round + k) % setups.length];
      const { result, cpu } = await setup.measure(TURN_SECONDS);
      const a = acc.get(setup.name);
      a.requests += result.requests;
      a.seconds += result.requests / result.rps;
      a.bad += result.bad;
      for (const [role, us] of Object.entries(cpu)) a.cpu[role] = (a.cpu[role] ?? 0) + us * result.requests;
      a.p50.push(result.p50);
      a.p99.push(result.p99);
      a.rps.push(result.rps);
    }
  }
  const out = {};
  for (const [name, a] of acc) {
    const n = Math.max(1, a.requests);
    out[name] = {
      name,
      rps: a.requests / a.seconds,
      p50: median(a.p50),
      p99: Math.max(...a.p99),
      total: a.requests,
      bad: a.bad,
      cpu: Object.fromEntries(Object.entries(a.cpu).map(([role, v]) => [role, v / n])),
      perRound: a.rps,
    };
  }
  return out;
}

export async function rssKiB(pid) {
  const s = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(s)[1]);
}

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ; 100 on Linux). */
const TICK_US = 1e6 / 100;

/** Every process of /proc with its parent and utime + stime in µs. */
export async function processTable() {
  const stats = new Map();
  for (const name of await readdir('/proc')) {
    if (!/^[0-9]+$/.test(name)) continue;
    const text = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => null);
    if (text === null) continue;
    // Fields after the command name, which is in parentheses and may contain spaces.
    const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
    stats.set(Number(name), { ppid: Number(f[1]), cpu: (Number(f[11]) + Number(f[12])) * TICK_US });
  }
  return stats;
}

/** `pid` and every descendant (a gateway may run worker processes). */
export async function treePids(pid, stats = null) {
  const table = stats ?? (await processTable());
  const pids = [];
  const todo = [pid];
  while (todo.length > 0) {
    const p = todo.pop();
    pids.push(p);
    for (const [child, s] of table) if (s.ppid === p) todo.push(child);
  }
  return pids;
}

/** utime + stime of `pid` and every descendant, in µs. */
export async function treeCpuUs(pid) {
  const stats = await processTable();
  let total = 0;
  for (const p of await treePids(pid, stats)) total += stats.get(p)?.cpu ?? 0;
  return total;
}

/**
 * Runs `fn` (a wrk run) and measures the CPU time of each role's process (and its children)
 * from /proc, per request answered: { result, cpu: { role: µs per request } }. The load
 * generator's is wrk's own (bench/wrk.mjs reads it from /proc when wrk has exited).
 */
export async function withCpu(roles, fn) {
  const before = {};
  for (const [role, pid] of Object.entries(roles)) if (pid) before[role] = await treeCpuUs(pid);
  const result = await fn();
  const cpu = {};
  const n = Math.max(1, result.requests);
  for (const [role, pid] of Object.entries(roles)) {
    if (!pid) continue;
    cpu[role] = ((await treeCpuUs(pid)) - before[role]) / n;
  }
  cpu['load generator'] = result.cpuUs / n;
  return { result, cpu };
}

/**
 * A private redis-server with AOF appendfsync always (the safe setting), recording every
 * event of 1 ms or more (LATENCY HISTORY: the AOF fsyncs, for the latency rows).
 */
export async function startRedis(port, dir) {
  const { child } = await start(
    'redis-server',
    [...durableRedisArgs(port, dir), '--latency-monitor-threshold', '1'],
    REDIS_READY,
  );
  return child;
}

/** Cumulative counts of the gateway's admission histogram (its view of the store round trip), by bucket. */
export async function admitBuckets(control) {
  const text = await (await fetch(`${control}/metrics`)).text();
  const out = {};
  for (const m of text.matchAll(
    /^fencegate_store_operation_duration_seconds_bucket\{le="([^"]+)",op="admit"\} ([0-9.e+]+)$/gm,
  )) {
    out[m[1]] = Number(m[2]);
  }
  return out;
}

/** "p50 ≤ a ms, p99 ≤ b ms" from bucket counts (the upper bound of the bucket each falls in). */
export function bucketQuantiles(buckets) {
  const les = Object.keys(buckets).sort((a, b) =>
    a === '+Inf' ? 1 : b === '+Inf' ? -1 : Number(a) - Number(b),
  );
  const total = buckets['+Inf'] ?? 0;
  if (total === 0) return '–';
  const q = (p) => {
    const le = les.find((l) => buckets[l] >= p * total);
    return le === '+Inf' ? '> 5000' : `≤ ${Number(le) * 1000}`;
  };
  return `${q(0.5)} / ${q(0.99)}`;
}

/** Seconds in which an AOF fsync took ≥ 1 ms since the last LATENCY RESET, as [ms, …]. */
export async function slowFsyncs(probe) {
  const history = await probe.call('LATENCY', 'HISTORY', 'aof-fsync-always');
  return history.map(([, ms]) => Number(ms));
}

/** Redis INFO commandstats as { command: calls }. */
export async function commandCalls(redis) {
  const out = {};
  for (const line of (await redis.info('commandstats')).split('\n')) {
    const m = /^cmdstat_([^:]+):calls=([0-9]+)/.exec(line.trim());
    if (m) out[m[1]] = Number(m[2]);
  }
  return out;
}
