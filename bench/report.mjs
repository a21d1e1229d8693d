/** bench/RESULTS.md's text (and what bench/run.mjs prints) from the rows' figures. */
import { cpus, totalmem } from 'node:os';
import {
  bucketQuantiles,
  CONNECTIONS,
  LATENCY_SECONDS,
  LATENCY_SLICES,
  LOCKS,
  median,
  SECONDS,
  slopePerMinute,
  SOAK,
  SOAK_FLAT_MIB,
  TURN_SECONDS,
  TURNS,
  WARMUP,
  WRK_THREADS,
  WRK_VERSION,
} from './core.mjs';

const ratio = (a, b) => (a / b).toFixed(3);
const us = (v) => (v === undefined ? '–' : v.toFixed(1));
const ms = (v) => v.toFixed(2);

/** One latency setup as a table row. */
const latencyRow = (name, r) =>
  `| ${name} | ${Math.round(r.rps)} | ${ms(r.p50)} | ${ms(r.p99)} | ${r.p999.toFixed(1)} | ${r.max.toFixed(1)} | ${ms(Math.min(...r.sliceP99))}–${ms(Math.max(...r.sliceP99))} | ${r.bad} |`;
/** The same setup's measurement conditions: the generator's lag, the host's CPU pressure, CPU per request. */
const latencyConditions = (name, r) =>
  `| ${name} | ${ms(r.sendLagP99Ms)} | ${ms(r.eldP99Ms)} / ${r.eldMaxMs.toFixed(1)} | ${r.pressurePct.toFixed(0)} % | ${us(r.cpu['load generator'])} | ${us(r.cpu.proxy)} | ${us(r.cpu.store)} | ${us(r.cpu.upstream)} | ${r.probe['+Inf'] ? bucketQuantiles(r.probe) : '–'} |`;

/** The slowest AOF fsync of each second that had one of 1 ms or more. */
function fsyncLine(label, list) {
  if (list === null) return '';
  if (list.length === 0) return `${label}: no fsync took 1 ms or more.`;
  const sorted = [...list].sort((a, b) => a - b);
  return `${label}: ${list.length} seconds had an fsync of 1 ms or more; the slowest of each second: median ${sorted[Math.floor(sorted.length / 2)]} ms, max ${sorted[sorted.length - 1]} ms.`;
}

const LATENCY_METHOD = (
  slices,
  sliceSeconds,
) => `Method (bench/paced.mjs, bench/latency.mjs): an open-loop generator in a process of its own
sends the PUTs evenly paced (request *i* due at start + *i*/rate, sent from a 1 ms timer over 32
keep-alive connections) and counts each request's latency from when it was **due**, so a
setup that falls behind is charged for its queue (no coordinated omission). The setups take
turns in ${slices} slices of ${sliceSeconds} s each (order rotated every round, after a 2 s warm-up each), so
that the shared host's swings hit them alike; percentiles are over all of a setup's requests,
"slice p99" is the range of its per-slice p99s. The second table says how far the figures can
be trusted: the generator's send lag (how late requests left after they were due, p99) and
its event-loop delay (\`monitorEventLoopDelay\`, 1 ms resolution, p99 / max), the host's CPU
pressure over the setup's slices (\`/proc/pressure/cpu\` "some": the share of time at least
one runnable task, any tenant's, waited for a core) and CPU per request of each process.
"direct upstream" (generator → upstream, no proxy) is the floor the machine sets. "fenced, redis
AOF on tmpfs" is a diagnostic: the same fenced writes on a second redis-server (appendfsync
always) whose AOF is on \`/dev/shm\`, where an fsync costs nothing (not a durable setup): what it
adds over the bare proxy is fencing without the disk, and the "fenced, redis" row's excess over
it is the fsync. "admission" is the gateway's own view of the admission round trip (its
\`fencegate_store_operation_duration_seconds{op="admit"}\` histogram over the setup's slices:
the bucket bounds p50 and p99 fall in). Below the tables, Redis's \`LATENCY HISTORY
aof-fsync-always\` over the run.`;

/**
 * The p99 fencing adds round by round: each round's fenced slice against the bare proxy's of
 * the same round (seconds apart), the median of the differences and how often fenced was lower.
 */
function pairedSlices(fenced, bare) {
  const d = fenced.sliceP99.map((f, i) => f - bare.sliceP99[i]);
  const lower = d.filter((x) => x < 0).length;
  return `Round by round (each round's fenced slice against the bare proxy's, seconds apart): slice p99 difference median ${median(d).toFixed(2)} ms, fenced lower in ${lower} of ${d.length} rounds.`;
}

/** The forged-token goal: a refusal of a token never issued costs no more than an admitted write. */
function forgedGoal(forged, admitted) {
  const cost = (x) => x.cpu.proxy + (x.cpu.store ?? 0);
  return `
Forged tokens (each lock's current token + 1000, never issued; ${forged.bad} answered otherwise than 403) each
take one admission round trip. Goal: no more than a write → gateway + store CPU per forged refusal
**${us(cost(forged))} µs** against ${us(cost(admitted))} µs per admitted write
(${(cost(forged) / cost(admitted)).toFixed(2)}×; these rows, one after another).
`;
}

/** bench/RESULTS.md's text for whatever was measured; `r.only`: the --only groups, or null. */
export function report(r) {
  const { results, bareResult } = r;
  const rows = results.map(
    (x) =>
      `| ${x.name} | ${Math.round(x.rps)} | ${ms(x.p50)} | ${ms(x.p99)} | ${ratio(x.rps, bareResult.rps)} | ${x.rssMiB === undefined ? '–' : x.rssMiB.toFixed(0)} | ${x.bad} |`,
  );
  const pair = (x) => (x.cpu.proxy === undefined ? undefined : x.cpu.proxy + (x.cpu.store ?? 0));
  const bareCpu = pair(bareResult);
  const cpuRows = results.map(
    (x) =>
      `| ${x.name} | ${us(x.cpu.proxy)} | ${us(x.cpu.store)} | ${us(pair(x))} | ${us(x.cpu.upstream)} | ${us(x.cpu['load generator'])} | ${pair(x) === undefined ? '–' : (pair(x) / bareCpu).toFixed(2)} |`,
  );
  const goals = [];
  if (r.redisResult)
    goals.push(
      `fenced writes on Redis ≥ 0.85× the bare proxy → **${ratio(r.redisResult.rps, bareResult.rps)}×**.`,
    );
  if (r.unfencedResult || r.unfencedRedis) {
    goals.push(
      `Unfenced route ≥ 1.0× →${r.unfencedResult ? ` **${ratio(r.unfencedResult.rps, bareResult.rps)}×** (embedded-store process)` : ''}${r.unfencedRedis ? ` **${ratio(r.unfencedRedis.rps, bareResult.rps)}×** (Redis-store process)` : ''}.`,
    );
  }
  if (r.workersResult && r.redisResult) {
    goals.push(`Fenced rows run \`--workers 1\` unless named;
with \`--workers 2\` (two gateway processes sharing the data port, on the same 2 cores as the
load generator, upstream and store) → **${ratio(r.workersResult.rps, bareResult.rps)}×**
(${ratio(r.workersResult.rps, r.redisResult.rps)}× one worker).`);
  }
  if (r.postgresResult)
    goals.push(
      `Fenced writes on the Postgres store ≥ 0.35× the bare proxy → **${ratio(r.postgresResult.rps, bareResult.rps)}×**.`,
    );
  // The goal is the command's as shipped: the row with the other heap setting is not counted.
  const shipped = results.filter((x) => x !== r.fastHeapResult && x.rssMiB !== undefined);
  if (shipped.length > 0) {
    goals.push(
      `Gateway RSS after its rows ≤ 200 MiB → **${Math.max(...shipped.map((x) => x.rssMiB)).toFixed(0)} MiB** (largest, the \`FENCEGATE_HEAP=fast\` row aside).`,
    );
  }
  if (r.embeddedResult && r.redisResult) {
    goals.push(`Fenced writes on the embedded store ≥ 0.5× the Redis store → **${ratio(r.embeddedResult.rps, r.redisResult.rps)}×**
(rows far apart in time: \`node bench/embedded.mjs\` interleaves the two); the embedded store's
process resident at idle / after its runs ≤ 150 MB (143 MiB) → **${(r.embeddedIdleKiB / 1024).toFixed(1)} / ${(r.embeddedLoadKiB / 1024).toFixed(1)} MiB**${
      r.fastHeapResult
        ? `; with \`FENCEGATE_HEAP=fast\` (not the default) **${(r.fastHeapIdleKiB / 1024).toFixed(1)} / ${(r.fastHeapLoadKiB / 1024).toFixed(1)} MiB**, at ${ratio(r.fastHeapResult.rps, r.redisResult.rps)}× the Redis store`
        : ''
    }.`);
  }
  const sections = [];
  sections.push(`# Benchmark results

Run ${r.started.toISOString()} on ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB,
Node ${process.version}${r.only === null ? '' : `, only: ${[...r.only].join(', ')}`}. Everything on loopback, on one machine: the load generator
(wrk ${WRK_VERSION}, ${WRK_THREADS} threads, ${CONNECTIONS} connections, bench/wrk-put.lua), upstream, proxy and store
share the 2 cores, so absolute numbers are low and the ratios are what to read. ${LOCKS} locks, PUT
with a 90-byte JSON body, ${SECONDS} s per row after a ${WARMUP} s warm-up. "bad" counts answers with another
status than the row expects (2xx; 409 for the stale row; wrk-put.lua checks every answer),
socket errors and timeouts; "RSS after" is the gateway process's resident memory right after
its row (with workers: the largest process).

## Saturation throughput

wrk is closed-loop (each connection sends its next request when the last is answered), so the
p50/p99 here are latencies at saturation, not the latency goal's (see the paced rows below).

| setup | req/s | p50 ms | p99 ms | × bare proxy | RSS after, MiB | bad |
|---|---|---|---|---|---|---|
${rows.join('\n')}
${goals.length > 0 ? `\nGoals${r.turns ? ' (these rows, one after another; the ratio goals are read from "The goals\' ratios, measured in turns" below)' : ''}: ${goals.join('\n')}\n` : ''}
### CPU per request, per process

From \`/proc/<pid>/stat\` (utime + stime of the process and its children, 10 ms ticks) over
each row's measured run, divided by the requests answered, in µs. "proxy" is the bare proxy or
the fencegate process; "store" the private redis-server (the Postgres server is shared and
not counted; the embedded store runs inside the fencegate process); "load generator" is the
wrk process (read from /proc by the shell that ran it, once it exited).

| setup | proxy | store | proxy + store | upstream | load generator | proxy + store × bare proxy |
|---|---|---|---|---|---|---|
${cpuRows.join('\n')}
${r.redisResult ? `\nGoal: the fenced path's gateway + store CPU per write ≤ 1.3× the bare proxy's per request →\n**${(pair(r.redisResult) / bareCpu).toFixed(2)}×**.\n` : ''}`);
  if (r.turns) {
    const T = r.turns;
    const b = T['bare proxy'];
    const perRound = (x, y) => {
      const rs = x.perRound.map((v, i) => v / y.perRound[i]);
      return `${ratio(median(rs), 1)}× (rounds ${ratio(Math.min(...rs), 1)}–${ratio(Math.max(...rs), 1)})`;
    };
    const cpuPair = (x) => x.cpu.proxy + (x.cpu.store ?? 0);
    const turnRow = (x) =>
      `| ${x.name} | ${Math.round(x.rps)} | ${ms(x.p50)} | ${ms(x.p99)} | ${ratio(x.rps, b.rps)} | ${us(x.cpu.proxy)} | ${us(x.cpu.store)} | ${(cpuPair(x) / cpuPair(b)).toFixed(2)} | ${x.bad} |`;
    sections.push(`## The goals' ratios, measured in turns

The rows above run one after another; on this shared host the throughput of the same setup
moves by ±20 % within minutes, which moves ratios of rows measured minutes apart as much. Here
the bare proxy and the Redis process's fenced writes, unfenced route and stale writes take
turns: ${TURNS} rounds of ${TURN_SECONDS} s each, the order rotated every round (wrk as above;
the processes warmed up by the rows above). Figures are over all of a setup's slices; p99 is
its largest slice's. "per round" is the median (and range) of the ratio between two setups
measured in the same round, seconds apart.

| setup | req/s | p50 ms | p99 ms | × bare proxy | gateway CPU µs/req | store CPU µs/req | gateway + store × bare | bad |
|---|---|---|---|---|---|---|---|---|
${Object.values(T).map(turnRow).join('\n')}

Goals:
- fenced writes on Redis ≥ 0.85× the bare proxy → **${ratio(T.fenced.rps, b.rps)}×**; per round ${perRound(T.fenced, b)}.
- unfenced route ≥ 1.0× → **${ratio(T.unfenced.rps, b.rps)}×**; per round ${perRound(T.unfenced, b)}.
- the fenced path's gateway + store CPU per write ≤ 1.3× the bare proxy's per request → **${(cpuPair(T.fenced) / cpuPair(b)).toFixed(2)}×**.
- stale writes refused ≥ 3× admitted fenced writes → **${ratio(T.stale.rps, T.fenced.rps)}×**; per round ${perRound(T.stale, T.fenced)}.

"fenced, holds off" is the same fenced writes through a second process started with
\`--admission-hold-ms 0\` (every write asks the store, as before admission holds): it runs at
**${ratio(T['fenced, holds off'].rps, b.rps)}×** the bare proxy; the holds' gain, fenced over holds off, per round ${perRound(T.fenced, T['fenced, holds off'])}.
`);
  }
  if (r.staleResult && r.redisResult) {
    const staleTotal = r.staleCommands.reduce((a, [, n]) => a + n, 0);
    sections.push(`## Stale floods (Redis store)

Every lock's token superseded by a newer one written once; then the same PUTs with the
old tokens, all refused 409 \`stale-token\` (${r.staleResult.bad} answered otherwise).

| | req/s | × admitted fenced writes |
|---|---|---|
| admitted fenced writes (the row above) | ${Math.round(r.redisResult.rps)} | 1.000 |
| stale writes refused | ${Math.round(r.staleResult.rps)} | ${ratio(r.staleResult.rps, r.redisResult.rps)} |
${r.forgedResult ? `| forged tokens refused (never issued: 403) | ${Math.round(r.forgedResult.rps)} | ${ratio(r.forgedResult.rps, r.redisResult.rps)} |\n` : ''}
Goal ≥ 3× → **${ratio(r.staleResult.rps, r.redisResult.rps)}×**. Redis \`INFO commandstats\` over the
${r.staleResult.total} refused writes: ${staleTotal} calls (${r.staleCommands.map(([c, n]) => `${c} ${n}`).join(', ') || 'none'}),
${(staleTotal / Math.max(1, r.staleResult.total)).toFixed(4)} per refused write (the gateway session's beats and
the sweeper run on their own timers, whatever the load).
${r.forgedResult ? forgedGoal(r.forgedResult, r.redisResult) : ''}`);
  }
  if (r.pgKind) {
    const k = r.pgKind;
    sections.push(`## \`kind: postgres\`: fenced row writes vs raw \`UPDATE … WHERE id = $1\`

Same Postgres server, same concurrency (${CONNECTIONS}), ${LOCKS} rows; the gateway's lock store is the
durable Redis above. Each fenced write through the gateway (wrk) is one transaction that
compares-and-sets the lock's fence row and updates the row, a statement prepared once
per connection, on the upstream's default pool of 10 connections (docs/postgres.md,
"Performance"); the raw loop is one \`UPDATE\` per call on a ${CONNECTIONS}-connection
node-postgres pool.

| setup | writes/s | p50 ms | p99 ms | bad |
|---|---|---|---|---|
| raw node-postgres UPDATE loop | ${Math.round(k.raw)} | – | – | 0 |
| fencegate kind: postgres, fenced PUT | ${Math.round(k.gateway)} | ${ms(k.p50)} | ${ms(k.p99)} | ${k.bad} |

Goal ≥ 0.6× the raw loop → **${ratio(k.gateway, k.raw)}×**.
`);
  }
  if (r.lockMemory?.length) {
    const rows = r.lockMemory
      .map(
        (m) =>
          `| ${m.store}${m.lockRetentionMs == null ? '' : ` (lockRetentionMs ${m.lockRetentionMs / 1000} s)`} | ${m.startMiB} | ${m.rss10kMiB} | ${m.rss200kMiB} | **${m.deltaMiB}** | ${m.anonDeltaMiB} | ${m.fileDeltaMiB} | ${m.deltaMiB <= 50 ? 'yes' : 'no'} |`,
      )
      .join('\n');
    sections.push(`## Memory against distinct locks

One gateway (\`serve --workers 1\`) takes N distinct locks, each acquired, written once
through the fenced route and released, 32 at a time (bench/memory-locks.mjs); RSS is read
after 10 s idle at 10 000 and at 200 000 locks. Of the growth: anonymous memory (heap,
malloc) and file pages mapped (the embedded store's data file, clean pages the kernel can
reclaim). The per-lock structures' bounds are in docs/observability.md.

| store | RSS at start, MiB | after 10k | after 200k | growth | of it anonymous | of it file-backed | goal ≤ 50 MiB |
|---|---|---|---|---|---|---|---|
${rows}
`);
  }
  if (r.latency) {
    const L = r.latency;
    const S = r.latencySustained;
    const bareL = L['bare proxy'];
    const fencedL = L['fenced, redis'];
    const keptUp = (x) => x.rps >= 0.97 * x.offered && x.bad === 0;
    const header = `| setup | req/s answered | p50 ms | p99 ms | p99.9 ms | max ms | slice p99 ms | bad |
|---|---|---|---|---|---|---|---|`;
    const condHeader = `| setup | send lag p99 ms | generator event-loop delay p99 / max ms | host CPU pressure | CPU µs/req: generator | proxy or gateway | store | upstream | admission p50 / p99, ms |
|---|---|---|---|---|---|---|---|---|`;
    sections.push(`## Latency added by fencing at half the bare proxy's saturation rate (${r.half} req/s)

${LATENCY_METHOD(LATENCY_SLICES, LATENCY_SECONDS / LATENCY_SLICES)}

${header}
${Object.entries(L)
  .map(([n, x]) => latencyRow(n, x))
  .join('\n')}

${condHeader}
${Object.entries(L)
  .map(([n, x]) => latencyConditions(n, x))
  .join('\n')}

${fsyncLine('Redis AOF fsyncs (disk)', r.fsyncs.disk)}
${fsyncLine('Redis AOF fsyncs (tmpfs)', r.fsyncs.tmpfs)}

${
  keptUp(fencedL)
    ? `p99 added by fencing: **${(fencedL.p99 - bareL.p99).toFixed(2)} ms** (goal ≤ 1 ms); p50 ${(fencedL.p50 - bareL.p50).toFixed(2)} ms.${L['fenced, redis AOF on tmpfs'] ? ` Without the disk's fsync (tmpfs row): p99 ${(L['fenced, redis AOF on tmpfs'].p99 - bareL.p99).toFixed(2)} ms, p50 ${(L['fenced, redis AOF on tmpfs'].p50 - bareL.p50).toFixed(2)} ms.` : ''}`
    : `Fenced writes did not keep up with this rate (${Math.round(fencedL.rps)} of ${r.half} req/s answered, ${fencedL.bad} bad): it is at or above their saturation, so their latency here is queueing; the goal is **not met**.`
}
${pairedSlices(fencedL, bareL)}

At ${r.sustained} req/s (half the fenced saturation rate, which both sustain):

${header}
${Object.entries(S)
  .map(([n, x]) => latencyRow(n, x))
  .join('\n')}

${condHeader}
${Object.entries(S)
  .map(([n, x]) => latencyConditions(n, x))
  .join('\n')}

Added by fencing there: p50 **${(S['fenced, redis'].p50 - S['bare proxy'].p50).toFixed(2)} ms**, p99 **${(S['fenced, redis'].p99 - S['bare proxy'].p99).toFixed(2)} ms**.
${pairedSlices(S['fenced, redis'], S['bare proxy'])}
`);
  }
  if (r.soaks.length > 0) {
    // RSS follows the young generation's sawtooth (tens of MiB), so the trend is read from
    // the troughs (lowest sample of each half, after the first) and a fitted slope.
    const trend = (samples) => {
      const settled = samples.slice(1).map((k) => k / 1024);
      const halfAt = Math.floor(settled.length / 2);
      const first = Math.min(...settled.slice(0, halfAt));
      const second = Math.min(...settled.slice(halfAt));
      return {
        first,
        second,
        growth: second - first,
        slope: slopePerMinute(settled, 5),
        max: Math.max(...settled),
      };
    };
    const rows = r.soaks.map((x) => ({ ...x, t: trend(x.samples) }));
    const flat = rows.every((x) => x.t.growth <= SOAK_FLAT_MIB && x.t.max <= 200 && x.result.bad === 0);
    sections.push(`## Resident memory over ${SOAK} s at the fenced saturation rate, every store

wrk as in the rows above, fenced PUTs for ${SOAK} s on each store: the Redis process after all its
rows above, the embedded and Postgres stores on fresh processes after a ${WARMUP} s warm-up. The
gateway's RSS is sampled every 5 s. It follows the young generation's sawtooth, so the trend is
read from the troughs: the lowest sample of the first half against the second's (from the
second sample on), and a fitted slope.

| store | req/s | bad | RSS every 5 s, MiB | lowest, first half → second | slope MiB/min |
|---|---|---|---|---|---|
${rows
  .map(
    (x) =>
      `| ${x.store} | ${Math.round(x.result.rps)} | ${x.result.bad} | ${x.samples.map((k) => (k / 1024).toFixed(1)).join(', ')} | ${x.t.first.toFixed(1)} → ${x.t.second.toFixed(1)} (${x.t.growth >= 0 ? '+' : ''}${x.t.growth.toFixed(1)}) | ${x.t.slope.toFixed(1)} |`,
  )
  .join('\n')}

Goal: flat on every store (the lowest sample grows by ≤ ${SOAK_FLAT_MIB} MiB from the first half to the
second) and ≤ 200 MiB → **${flat ? 'met' : 'not met'}** (largest sample ${Math.max(...rows.map((x) => x.t.max)).toFixed(1)} MiB).
`);
  }
  return sections.join('\n');
}
