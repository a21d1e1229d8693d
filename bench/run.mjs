#!/usr/bin/env node
/**
 * `npm run bench`: side by side in one run, on the same upstream and machine:
 *   direct upstream · bare @fastify/http-proxy · fencegate unfenced route ·
 *   fencegate fenced writes on the embedded, Postgres and Redis stores, and on Redis
 *   with `check: sequencer` (signed sequencers verified per write, cached);
 * then p99 at half the bare proxy's saturation rate (bare vs fenced on Redis), and
 * the fencegate process's resident memory over a 60 s run; and `kind: postgres` row writes
 * against a raw node-postgres UPDATE loop (bench/postgres-kind.mjs).
 * Prints a table and writes bench/RESULTS.md. Loopback only; every run is bounded.
 *
 * Env: BENCH_SECONDS (saturation runs, default 10), BENCH_SOAK_SECONDS (default 60),
 *      BENCH_CONNECTIONS (default 32),
 *      BENCH_ONLY (comma-separated rows to run, e.g. `bare,postgres`: direct, bare,
 *      unfenced, embedded, postgres, redis, sequencer, latency, soak, pg-kind; for
 *      short A/B runs of one row: the table is printed and bench/RESULTS.md is left
 *      alone). Each fenced row also reports the gateway's resident memory after it.
 */
import autocannon from 'autocannon';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir, cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { paced } from './paced.mjs';
import { benchPostgresKind } from './postgres-kind.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const SOAK = Number(process.env.BENCH_SOAK_SECONDS ?? 60);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const LOCKS = 16;
const ROWS = [
  'direct',
  'bare',
  'unfenced',
  'embedded',
  'postgres',
  'redis',
  'sequencer',
  'latency',
  'soak',
  'pg-kind',
];
const ONLY = process.env.BENCH_ONLY ? new Set(process.env.BENCH_ONLY.split(',').map((r) => r.trim())) : null;
for (const row of ONLY ?? []) {
  if (!ROWS.includes(row)) throw new Error(`BENCH_ONLY: unknown row "${row}"; rows: ${ROWS.join(', ')}`);
}
/** Whether a row is run (all of them unless BENCH_ONLY names some). */
const want = (row) => ONLY === null || ONLY.has(row);
const PG_URL = process.env.FENCEGATE_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';
const children = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function freePort() {
  const s = createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const { port } = s.address();
  s.close();
  return port;
}

async function spawnUntil(cmd, args, pattern, opts = {}) {
  const child = spawn(cmd, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], ...opts });
  children.push(child);
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const end = Date.now() + 30_000;
  let m;
  while (!(m = pattern.exec(out))) {
    if (child.exitCode !== null) throw new Error(`${cmd} ${args.join(' ')} exited: ${out}`);
    if (Date.now() > end) throw new Error(`${cmd} did not start: ${out}`);
    await sleep(20);
  }
  return { child, m, output: () => out };
}

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  await Promise.race([once(child, 'exit'), sleep(5000).then(() => child.kill('SIGKILL'))]);
}

async function fencegate(store, policyDir, extra = []) {
  // Run as the installed command is (bin/fencegate.js starts Node with its tuning flags).
  const { child, m } = await spawnUntil(
    join(ROOT, 'bin/fencegate.js'),
    [
      'serve',
      '--store',
      store,
      '--policies',
      policyDir,
      '--listen',
      '127.0.0.1:0',
      '--control',
      '127.0.0.1:0',
      '--log-level',
      'error',
      ...extra,
    ],
    /listening data=([^\s"]+) control=([^\s"]+)/,
  );
  return { child, data: m[1], control: m[2] };
}

async function acquireTokens(control, prefix) {
  return (await acquireLeases(control, prefix)).map((l) => l.token);
}

/** One lease per lock, as the issuer answers it (token, and sequencer when keys are configured). */
async function acquireLeases(control, prefix) {
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

/** PUT /{base}/{i} rotating over LOCKS ids, with each lock's token (and sequencer) when given. */
function run(url, { base = 'orders', tokens = null, sequencers = null, seconds = SECONDS, rate } = {}) {
  let n = 0;
  const body = JSON.stringify({ status: 'shipped', note: 'x'.repeat(64) });
  return autocannon({
    url,
    connections: CONNECTIONS,
    duration: seconds,
    ...(rate ? { overallRate: rate } : {}),
    requests: [
      {
        method: 'PUT',
        setupRequest(req) {
          const i = n++ % LOCKS;
          const headers = { 'content-type': 'application/json' };
          if (tokens) headers['fencing-token'] = tokens[i];
          if (sequencers) headers['fencing-sequencer'] = sequencers[i];
          return { ...req, path: `/${base}/${i}`, headers, body };
        },
      },
    ],
  });
}

const latencyRow = (name, r) =>
  `| ${name} | ${Math.round(r.rps)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.max.toFixed(1)} | ${r.bad} |`;

/** The same PUTs as run(), open-loop and evenly paced at `rate` (bench/paced.mjs). */
async function pacedRun(url, { base = 'orders', tokens = null, seconds = SECONDS, rate }) {
  const body = JSON.stringify({ status: 'shipped', note: 'x'.repeat(64) });
  const opts = (secs) => ({
    rate,
    seconds: secs,
    connections: CONNECTIONS,
    request(n) {
      const i = n % LOCKS;
      const headers = { 'content-type': 'application/json' };
      if (tokens) headers['fencing-token'] = tokens[i];
      return { path: `/${base}/${i}`, headers, body };
    },
  });
  await paced(url, opts(2)); // warm-up: connections opened, code paths compiled
  return paced(url, opts(seconds));
}

/** Least-squares slope of samples taken every `stepS` seconds, in units per minute. */
function slopePerMinute(samples, stepS) {
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

function summarize(name, r) {
  const bad = r.non2xx + r.errors + r.timeouts;
  return {
    name,
    rps: r.requests.average,
    p50: r.latency.p50,
    p99: r.latency.p99,
    total: r.requests.total,
    bad,
  };
}

async function rssKiB(pid) {
  const s = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(s)[1]);
}

async function main() {
  const started = new Date();
  const tmp = await mkdtemp(join(tmpdir(), 'fg-bench-'));
  const results = [];
  const say = (s) => process.stdout.write(`${s}\n`);
  /** A fenced row on a running gateway: warm-up, measured run, then its resident memory. */
  const gatewayRow = async (name, gw, opts) => {
    await run(gw.data, { ...opts, seconds: 2 });
    const row = summarize(name, await run(gw.data, opts));
    row.rssMiB = (await rssKiB(gw.child.pid)) / 1024;
    results.push(row);
    return row;
  };

  const { m: um } = await spawnUntil(process.execPath, ['bench/upstream.mjs'], /listening (\S+)/);
  const upstream = um[1];
  const policyDir = join(tmp, 'policies');
  await (await import('node:fs/promises')).mkdir(policyDir);
  const policy = (lockPrefix) => `version: 1
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
  - name: sequenced-writes
    methods: [PUT]
    path: /sequenced/:id
    upstream: bench
    lock: "sequenced:{id}"
    fencing: { check: sequencer }
`;
  await writeFile(join(policyDir, 'bench.yaml'), policy('order'));

  if (want('direct')) {
    say(`direct upstream …`);
    await run(upstream, { seconds: 2 }); // warm-up
    results.push(summarize('direct upstream', await run(upstream)));
  }

  let bare = null;
  let bareResult = null;
  if (want('bare') || want('latency') || want('soak')) {
    bare = await spawnUntil(process.execPath, ['bench/bare-proxy.mjs', upstream], /listening (\S+)/);
    say(`bare @fastify/http-proxy …`);
    await run(bare.m[1], { seconds: 2 });
    bareResult = summarize('bare @fastify/http-proxy', await run(bare.m[1]));
    results.push(bareResult);
  }

  // Embedded store: unfenced route and fenced writes.
  let unfencedResult = null;
  let tokens;
  if (want('unfenced') || want('embedded')) {
    const embedded = await fencegate(join(tmp, 'embedded'), policyDir);
    if (want('unfenced')) {
      say(`fencegate unfenced route …`);
      unfencedResult = await gatewayRow('fencegate, unfenced route', embedded, { base: 'open' });
    }
    if (want('embedded')) {
      say(`fencegate fenced, embedded …`);
      tokens = await acquireTokens(embedded.control, 'order');
      await gatewayRow('fencegate fenced, embedded store', embedded, { tokens });
    }
    await stop(embedded.child);
  }

  // Postgres store, a throwaway schema on the shared server.
  const schema = `fgbench_${Date.now()}`;
  if (want('postgres')) {
    const postgres = await fencegate(PG_URL, policyDir, ['--store-namespace', schema]);
    say(`fencegate fenced, postgres …`);
    tokens = await acquireTokens(postgres.control, 'order');
    await gatewayRow('fencegate fenced, postgres store', postgres, { tokens });
    await stop(postgres.child);
  }

  // Redis store: a private redis-server with AOF appendfsync always (the safe setting).
  const redisPort = await freePort();
  let redisResult = null;
  let tail = '';
  if (want('redis') || want('sequencer') || want('latency') || want('soak') || want('pg-kind')) {
    const redisDir = join(tmp, 'redis');
    await (await import('node:fs/promises')).mkdir(redisDir);
    await spawnUntil(
      'redis-server',
      [
        '--port',
        String(redisPort),
        '--bind',
        '127.0.0.1',
        '--dir',
        redisDir,
        '--save',
        '',
        '--appendonly',
        'yes',
        '--appendfsync',
        'always',
      ],
      /Ready to accept connections/,
    );
  }
  if (want('redis') || want('sequencer') || want('latency') || want('soak')) {
    // Sequencer keys for the Redis process (Postgres and Redis stores take them from a file).
    const keyFile = join(tmp, 'sequencer-keys.json');
    await spawnUntil(join(ROOT, 'bin/fencegate.js'), ['keys', 'init', keyFile], /made/);
    const redis = await fencegate(`redis://127.0.0.1:${redisPort}`, policyDir, ['--sequencer-keys', keyFile]);
    tokens = await acquireTokens(redis.control, 'order');
    if (want('redis') || want('latency') || want('soak')) {
      say(`fencegate fenced, redis …`);
      redisResult = await gatewayRow('fencegate fenced, redis store (AOF always)', redis, { tokens });
    }
    if (want('sequencer')) {
      // The same writes on a check: sequencer route: the SDK's headers (token and sequencer).
      say(`fencegate fenced, redis, check: sequencer …`);
      const leases = await acquireLeases(redis.control, 'sequenced');
      const sequenced = {
        base: 'sequenced',
        tokens: leases.map((l) => l.token),
        sequencers: leases.map((l) => l.sequencer),
      };
      await gatewayRow('fencegate fenced, redis store, check: sequencer', redis, sequenced);
    }
    if (want('latency')) tail += await latencySection(bare, bareResult, redis, redisResult, tokens);
    if (want('soak')) tail += await soakSection(bareResult, redis, tokens);
    await stop(redis.child);
  }
  if (bare) await stop(bare.child);

  // kind: postgres (lock store: the same durable Redis) vs a raw UPDATE loop.
  if (want('pg-kind')) {
    const pgKind = await benchPostgresKind({
      tmp,
      store: `redis://127.0.0.1:${redisPort}`,
      fencegate,
      stop,
      seconds: SECONDS,
      connections: CONNECTIONS,
      pgUrl: PG_URL,
      locks: LOCKS,
      say,
    });
    tail =
      `
## \`kind: postgres\`: fenced row writes vs raw \`UPDATE … WHERE id = $1\`

Same Postgres server, same concurrency (${CONNECTIONS}), ${LOCKS} rows; the gateway's lock store is the
durable Redis above. Each fenced write through the gateway is one transaction that
compares-and-sets the lock's fence row and updates the row; the raw loop is one
\`UPDATE\` per call on a ${CONNECTIONS}-connection node-postgres pool.

| setup | writes/s | p50 ms | p99 ms | bad |
|---|---|---|---|---|
| raw node-postgres UPDATE loop | ${Math.round(pgKind.raw)} | – | – | 0 |
| fencegate kind: postgres, fenced PUT | ${Math.round(pgKind.gateway)} | ${pgKind.p50} | ${pgKind.p99} | ${pgKind.bad} |

Goal ≥ 0.6× the raw loop → **${ratio(pgKind.gateway, pgKind.raw)}×**.
` + tail;
  }

  if (want('postgres')) {
    // Clean up the Postgres schema.
    const c = new pg.Client({ connectionString: PG_URL });
    await c.connect();
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await c.end();
  }

  const rows = results.map(
    (r) =>
      `| ${r.name} | ${Math.round(r.rps)} | ${r.p50} | ${r.p99} | ${bareResult ? ratio(r.rps, bareResult.rps) : '–'} | ${r.rssMiB === undefined ? '–' : r.rssMiB.toFixed(0)} | ${r.bad} |`,
  );
  const goals = [];
  const pgResult = results.find((r) => r.name === 'fencegate fenced, postgres store');
  if (bareResult && redisResult)
    goals.push(
      `fenced writes on Redis ≥ 0.85× the bare proxy → **${ratio(redisResult.rps, bareResult.rps)}×**`,
    );
  if (bareResult && pgResult)
    goals.push(`fenced writes on Postgres ≥ 0.35× → **${ratio(pgResult.rps, bareResult.rps)}×**`);
  if (bareResult && unfencedResult)
    goals.push(`unfenced route ≥ 0.95× → **${ratio(unfencedResult.rps, bareResult.rps)}×**`);
  const rssMax = Math.max(0, ...results.map((r) => r.rssMiB ?? 0));
  const md = `# Benchmark results

Run ${started.toISOString()} on ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB,
Node ${process.version}. Everything on loopback, on one machine: load generator (autocannon,
${CONNECTIONS} connections), upstream, proxy and store share the 2 cores, so absolute numbers
are low and the ratios are what to read. ${LOCKS} locks, PUT with a 90-byte JSON body, ${SECONDS} s per
row after a 2 s warm-up. "bad" counts non-2xx answers, errors and timeouts; "RSS after" is the
gateway process's resident memory right after its row.

## Saturation throughput

| setup | req/s | p50 ms | p99 ms | × bare proxy | RSS after, MiB | bad |
|---|---|---|---|---|---|---|
${rows.join('\n')}

Goals: ${goals.join(';\n')}${goals.length > 0 ? ';\n' : ''}gateway RSS after its rows ≤ 200 MiB → **${rssMax.toFixed(0)} MiB**.
${tail}`;
  if (ONLY !== null) {
    // A partial run (BENCH_ONLY) is for comparing builds; RESULTS.md keeps the whole run.
    process.stdout.write(`\n${md}`);
    await rm(tmp, { recursive: true, force: true });
    return;
  }
  // A hand-written "What limits it" section (profile findings) is carried over to the new results.
  const previous = await readFile(join(ROOT, 'bench', 'RESULTS.md'), 'utf8').catch(() => '');
  const notesAt = previous.indexOf('\n## What limits it');
  const notes = notesAt < 0 ? '' : previous.slice(notesAt);
  await writeFile(join(ROOT, 'bench', 'RESULTS.md'), md + notes);
  process.stdout.write(`\n${md}`);
  await rm(tmp, { recursive: true, force: true });
}

const ratio = (a, b) => (a / b).toFixed(3);

/** p99 at half the bare proxy's saturation rate, bare vs fenced on Redis, as a RESULTS section. */
async function latencySection(bare, bareResult, redis, redisResult, tokens) {
  const half = Math.max(100, Math.floor(bareResult.rps / 2));
  process.stdout.write(`p99 at ${half} req/s …\n`);
  const bareHalf = await pacedRun(bare.m[1], { rate: half });
  const fencedHalf = await pacedRun(redis.data, { tokens, rate: half });
  // The goal's rate is only a latency measurement if fenced writes keep up with it; when
  // they saturate below it, the comparison is also made at a rate both sustain.
  const keptUp = (r) => r.rps >= 0.97 * r.offered && r.bad === 0;
  const sustained = Math.max(100, Math.floor(redisResult.rps / 2));
  process.stdout.write(`p99 at ${sustained} req/s (half the fenced saturation rate) …\n`);
  const bareSustained = await pacedRun(bare.m[1], { rate: sustained });
  const fencedSustained = await pacedRun(redis.data, { tokens, rate: sustained });
  return `
## Latency added by fencing at half the bare proxy's saturation rate (${half} req/s)

Open loop, evenly paced (\`bench/paced.mjs\`; latency counted from when each request was due,
so a setup that falls behind is charged for its queue), ${SECONDS} s per row.

| setup | req/s answered | p50 ms | p99 ms | max ms | bad |
|---|---|---|---|---|---|
${latencyRow('bare proxy', bareHalf)}
${latencyRow('fenced, redis', fencedHalf)}

${
  keptUp(fencedHalf)
    ? `p99 added by fencing: **${(fencedHalf.p99 - bareHalf.p99).toFixed(2)} ms** (goal ≤ 1 ms).`
    : `Fenced writes did not keep up with this rate (${Math.round(fencedHalf.rps)} of ${half} req/s answered, ${fencedHalf.bad} bad): it is at or above their saturation, so their latency here is queueing; the goal is **not met**.`
}

At ${sustained} req/s (half the fenced saturation rate, which both sustain):

| setup | req/s answered | p50 ms | p99 ms | max ms | bad |
|---|---|---|---|---|---|
${latencyRow('bare proxy', bareSustained)}
${latencyRow('fenced, redis', fencedSustained)}

Added by fencing there: p50 **${(fencedSustained.p50 - bareSustained.p50).toFixed(2)} ms**, p99 **${(fencedSustained.p99 - bareSustained.p99).toFixed(2)} ms**.
`;
}

/** The Redis gateway's resident memory over SOAK s at half the bare proxy's rate, as a RESULTS section. */
async function soakSection(bareResult, redis, tokens) {
  const half = Math.max(100, Math.floor(bareResult.rps / 2));
  process.stdout.write(`resident memory over ${SOAK} s …\n`);
  const samples = [];
  const soak = run(redis.data, { tokens, rate: half, seconds: SOAK });
  const sampler = setInterval(() => void rssKiB(redis.child.pid).then((k) => samples.push(k)), 5000);
  const soakResult = summarize('soak', await soak);
  clearInterval(sampler);
  // RSS follows the young generation's sawtooth (tens of MiB), so the trend is read from
  // the troughs (lowest sample of each half, after the first) and a fitted slope.
  const settled = samples.slice(1).map((k) => k / 1024);
  const halfAt = Math.floor(settled.length / 2);
  const troughFirst = Math.min(...settled.slice(0, halfAt));
  const troughSecond = Math.min(...settled.slice(halfAt));
  return `
## Resident memory over ${SOAK} s (fenced, redis, ${half} req/s, ${soakResult.total} requests, ${soakResult.bad} bad)

Samples every 5 s (MiB): ${samples.map((k) => (k / 1024).toFixed(1)).join(', ')}.
Lowest sample of the first half vs the second (from the second sample on): ${troughFirst.toFixed(1)} → ${troughSecond.toFixed(1)} MiB (${(troughSecond - troughFirst).toFixed(1)}); fitted slope ${slopePerMinute(settled, 5).toFixed(1)} MiB/min.
`;
}

main()
  .catch((err) => {
    process.stderr.write(`bench failed: ${err.stack ?? err}\n`);
    process.exitCode = 1;
  })
  .finally(async () => {
    for (const c of children) await stop(c).catch(() => {});
  });
