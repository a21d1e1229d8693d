#!/usr/bin/env node
/**
 * `node bench/embedded.mjs` (after `npm run build`): the embedded store against the
 * Redis store (a private redis-server with AOF appendfsync always) in one run, rounds
 * interleaved so that a shared machine's swings hit both alike. Reports:
 *   - first start: `fencegate serve` on an empty directory, spawn → "listening";
 *   - resident memory (VmRSS) of the fencegate process at idle and after the fenced runs;
 *   - fenced writes/s per round on each store and the embedded/Redis ratio.
 * Goals (issue 13, item 4): RSS ≤ 150 MB, first start ≤ 2 s, ratio ≥ 0.5.
 * Loopback only; every run is bounded.
 *
 * Load: wrk (bench/wrk.mjs; `apt-get install wrk`).
 *
 * Env: BENCH_SECONDS (per round, default 5), BENCH_ROUNDS (default 3), BENCH_CONNECTIONS (32).
 */
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { requireWrk, wrk } from './wrk.mjs';
import { durableRedisArgs, freePort, LISTENING, REDIS_READY, serveArgs, spawnUntil } from './lib.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const LOCKS = 16;
const children = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const start = (cmd, args, pattern) => spawnUntil(cmd, args, pattern, { children, cwd: ROOT });

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  await Promise.race([once(child, 'exit'), sleep(5000).then(() => child.kill('SIGKILL'))]);
}

async function fencegate(store, policyDir) {
  const started = performance.now();
  const { child, m } = await start(join(ROOT, 'bin/fencegate.js'), serveArgs(store, policyDir), LISTENING);
  return { child, data: m[1], control: m[2], startMs: performance.now() - started };
}

async function rssMiB(pid) {
  const s = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(s)[1]) / 1024;
}

/** Resident memory split: anonymous (JS heap, buffers), file-backed (code, LMDB's map), shared memory. */
async function rssSplit(pid) {
  const s = await readFile(`/proc/${pid}/status`, 'utf8');
  const f = (name) => (Number(new RegExp(`${name}:\\s+(\\d+)`).exec(s)?.[1] ?? 0) / 1024).toFixed(1);
  return `anon ${f('RssAnon')}, file ${f('RssFile')}, shmem ${f('RssShmem')} MiB`;
}

async function acquireTokens(control) {
  const tokens = [];
  for (let i = 0; i < LOCKS; i++) {
    const res = await fetch(`${control}/v1/locks/${encodeURIComponent(`order:${i}`)}/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ owner: 'bench', ttlMs: 3_600_000 }),
    });
    if (res.status !== 200) throw new Error(`acquire failed: ${res.status} ${await res.text()}`);
    tokens.push((await res.json()).token);
  }
  return tokens;
}

/** Fenced writes/s for `seconds` with wrk (bench/wrk.mjs: the PUT of run.mjs's rows, statuses checked). */
async function fenced(url, tokens, seconds) {
  const r = await wrk(url, { tokens, seconds, connections: CONNECTIONS, locks: LOCKS });
  if (r.bad > 0) throw new Error(`${r.bad} fenced writes failed on ${url} (last status ${r.lastBadStatus})`);
  return r.rps;
}

async function main() {
  requireWrk();
  const tmp = await mkdtemp(join(tmpdir(), 'fg-bench-embedded-'));
  const say = (s) => process.stdout.write(`${s}\n`);
  const { m: um } = await start(process.execPath, ['bench/upstream.mjs'], /listening (\S+)/);
  const policyDir = join(tmp, 'policies');
  await mkdir(policyDir);
  await writeFile(
    join(policyDir, 'bench.yaml'),
    `version: 1
upstreams:
  bench: { kind: http, url: ${um[1]}, timeoutMs: 10000 }
routes:
  - { name: fenced-writes, methods: [PUT], path: /orders/:id, upstream: bench, lock: "order:{id}" }
`,
  );
  const redisPort = await freePort();
  const redisDir = join(tmp, 'redis');
  await mkdir(redisDir);
  await start('redis-server', durableRedisArgs(redisPort, redisDir), REDIS_READY);

  const embedded = await fencegate(join(tmp, 'embedded'), policyDir);
  say(`first start on an empty directory: ${Math.round(embedded.startMs)} ms`);
  await sleep(2000);
  const idle = await rssMiB(embedded.child.pid);
  say(`embedded, idle: ${idle.toFixed(1)} MiB resident (${await rssSplit(embedded.child.pid)})`);
  const redis = await fencegate(`redis://127.0.0.1:${redisPort}`, policyDir);
  say(`the same start on the Redis store, for comparison: ${Math.round(redis.startMs)} ms`);
  const stores = [
    { name: 'embedded', p: embedded, tokens: await acquireTokens(embedded.control), rps: [], rss: [] },
    { name: 'redis', p: redis, tokens: await acquireTokens(redis.control), rps: [], rss: [] },
  ];
  for (const s of stores) await fenced(s.p.data, s.tokens, 2); // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    for (const s of round % 2 === 0 ? stores : [...stores].reverse()) {
      s.rps.push(await fenced(s.p.data, s.tokens, SECONDS));
      s.rss.push(await rssMiB(s.p.child.pid));
      say(
        `round ${round + 1} ${s.name}: ${Math.round(s.rps.at(-1))} fenced writes/s, ${s.rss.at(-1).toFixed(1)} MiB`,
      );
    }
  }
  const [e, r] = stores;
  const ratios = e.rps.map((x, i) => x / r.rps[i]);
  await sleep(2000);
  say(
    `embedded, idle after the runs: ${(await rssMiB(embedded.child.pid)).toFixed(1)} MiB resident ` +
      `(${await rssSplit(embedded.child.pid)}); redis-store process: ${await rssSplit(redis.child.pid)}`,
  );
  say(`embedded/redis per round: ${ratios.map((x) => x.toFixed(2)).join(', ')}`);
  say(
    `embedded under load, highest: ${Math.max(...e.rss).toFixed(1)} MiB; redis process: ${Math.max(...r.rss).toFixed(1)} MiB`,
  );
  await rm(tmp, { recursive: true, force: true });
}

main()
  .catch((err) => {
    process.stderr.write(`bench failed: ${err.stack ?? err}\n`);
    process.exitCode = 1;
  })
  .finally(async () => {
    for (const c of children.reverse()) await stop(c).catch(() => {});
  });
