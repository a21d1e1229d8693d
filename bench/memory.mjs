#!/usr/bin/env node
/**
 * What the gateway's resident memory is made of, and what a setting costs in throughput,
 * for comparing Node flags and builds side by side on a noisy host (docs/adr/0004, addendum).
 * For each round, store and variant (interleaved), a fresh `fencegate serve
 * --workers 1` takes fenced PUTs from wrk (bench/wrk.mjs: 32 connections, 16 locks, after a 2 s
 * warm-up) for `seconds`; the run reports per variant:
 *   - fenced writes/s, and the gateway's CPU time per write (/proc/PID/stat); with
 *     --trace-gc among a variant's flags, its main-thread GC pauses per 1 000 writes;
 *   - VmRSS at idle after start, its highest sample during the load (every 250 ms), right
 *     after the load (what `npm run bench` reports as "RSS after") and 5 s later;
 *   - with --probe, right after the load: /proc/PID/smaps split into the LMDB map
 *     (fencegate.mdb), Node's binary, other files (libraries, native addons) and anonymous
 *     memory, and the process's own view (bench/mem-probe.mjs on SIGUSR2: V8's heap spaces,
 *     external and array buffers, malloced memory).
 *
 *   node bench/memory.mjs [--stores embedded,redis] [--seconds 10] [--rounds 2] [--probe]
 *                         [--variant NAME[@BUILD]=NODE-FLAGS ...] [--logs DIR]
 *
 * A variant is the node flags the gateway starts with (space-separated) and optionally a
 * build (a checkout with dist/ built; default: this one). Without --variant: bin/fencegate.js
 * run as a program, as the installed command is (the flags it starts Node with, ADR 0004). Example:
 *   node bench/memory.mjs --variant s32=--max-semi-space-size=32 --variant s16=--max-semi-space-size=16
 * --logs DIR keeps each gateway's output (e.g. with --trace-gc among the flags).
 * `postgres` as a store uses FENCEGATE_TEST_POSTGRES (default postgres://postgres@127.0.0.1:5432/test).
 */
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { requireWrk, wrk } from './wrk.mjs';
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
    stores: { type: 'string', default: 'embedded,redis' },
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '2' },
    probe: { type: 'boolean', default: false },
    variant: { type: 'string', multiple: true, default: [] },
    logs: { type: 'string' },
  },
});
const STORES = opt.stores.split(',');
const SECONDS = Number(opt.seconds);
const ROUNDS = Number(opt.rounds);
const CONNECTIONS = 32;
const LOCKS = 16;
const PG_URL = process.env.FENCEGATE_TEST_POSTGRES ?? 'postgres://postgres@127.0.0.1:5432/test';
const PROBE = join(ROOT, 'bench/mem-probe.mjs');
const MiB = 1024 * 1024;
const children = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function variants() {
  // No flags: run bin/fencegate.js as a program, with the flags it starts Node with.
  if (opt.variant.length === 0) return [{ name: 'launcher', build: ROOT, flags: null }];
  return opt.variant.map((v) => {
    const m = /^([^@=]+)(?:@([^=]+))?=(.*)$/.exec(v);
    if (!m) throw new Error(`--variant NAME[@BUILD]=FLAGS, got ${v}`);
    return { name: m[1], build: resolve(m[2] ?? ROOT), flags: m[3].split(' ').filter(Boolean) };
  });
}

const start = (cmd, args, pattern, env = process.env) => spawnUntil(cmd, args, pattern, { children, env });

async function rssMiB(pid) {
  const s = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(s)[1]) / 1024;
}

/** Resident MiB per kind of mapping, from /proc/PID/smaps. */
async function smapsSplit(pid) {
  const node = realpathSync(process.execPath);
  const out = { lmdbMap: 0, nodeBinary: 0, otherFiles: 0, anon: 0, anonInFiles: 0 };
  let kind = 'anon';
  const maps = [];
  for (const line of (await readFile(`/proc/${pid}/smaps`, 'utf8')).split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      const path = head[1];
      if (path.endsWith('fencegate.mdb')) kind = 'lmdbMap';
      else if (path === node) kind = 'nodeBinary';
      else if (path.startsWith('/')) kind = 'otherFiles';
      else kind = 'anon'; // '', [heap], [stack], [anon:…]
      maps.push({ map: line.split(' ')[0], path, rss: 0 });
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) {
      out[kind] += Number(rss[1]) / 1024;
      maps.at(-1).rss += Number(rss[1]) / 1024;
    }
    // Private copies of file pages (a library's data, relocations) count as anonymous too.
    const anon = /^Anonymous:\s+(\d+) kB/.exec(line);
    if (anon && kind !== 'anon') out.anonInFiles += Number(anon[1]) / 1024;
  }
  // The largest mappings, for a closer look (printed with the row on stderr).
  out.largest = maps
    .sort((a, b) => b.rss - a.rss)
    .slice(0, 12)
    .map((m) => {
      const [from, to] = m.map.split('-').map((x) => parseInt(x, 16));
      return `${m.path || 'anon'} ${((to - from) / MiB).toFixed(1)}/${m.rss.toFixed(1)}`;
    });
  return out;
}

async function probe(pid, file) {
  const before = await readFile(file, 'utf8').catch(() => '');
  process.kill(pid, 'SIGUSR2');
  for (let i = 0; i < 100; i++) {
    await sleep(20);
    const now = await readFile(file, 'utf8').catch(() => '');
    if (now.length > before.length) return JSON.parse(now.trim().split('\n').at(-1));
  }
  throw new Error('no answer from the memory probe');
}

/** The process's own view, through bench/mem-probe.mjs. */
async function snapshot(pid, file) {
  const p = await probe(pid, file);
  return {
    heap: {
      total: p.usage.heapTotal / MiB,
      used: p.usage.heapUsed / MiB,
      external: p.usage.external / MiB,
      arrayBuffers: p.usage.arrayBuffers / MiB,
      malloced: p.mallocedMemory / MiB,
    },
    spaces: Object.fromEntries(
      Object.entries(p.spaces)
        .filter(([, s]) => s.size > 0)
        .map(([k, s]) => [k, `${(s.physical / MiB).toFixed(1)}/${(s.used / MiB).toFixed(1)}`]),
    ),
  };
}

/** Fenced PUTs for `seconds` with wrk (bench/wrk.mjs: the PUT of run.mjs's rows, statuses checked). */
async function fenced(url, tokens, seconds) {
  const r = await wrk(url, { tokens, seconds, connections: CONNECTIONS, locks: LOCKS });
  if (r.bad > 0) throw new Error(`${r.bad} fenced writes failed on ${url} (last status ${r.lastBadStatus})`);
  return { rps: r.rps, total: r.requests };
}

/** Main-thread pause times in --trace-gc lines ("… MB, 8.53 / 0.02 ms …"), or null without them. */
function gcPauses(text) {
  let scavengeMs = 0;
  let markCompactMs = 0;
  let markCompacts = 0;
  let seen = false;
  for (const m of text.matchAll(/: (Scavenge|Mark-Compact) .*? MB, ([0-9.]+) \/ [0-9.]+ ms/g)) {
    seen = true;
    if (m[1] === 'Scavenge') scavengeMs += Number(m[2]);
    else {
      markCompactMs += Number(m[2]);
      markCompacts++;
    }
  }
  return seen ? { scavengeMs, markCompactMs, markCompacts } : null;
}

/** CPU time of a process so far (utime + stime, 10 ms ticks), in µs. */
async function cpuUs(pid) {
  const t = await readFile(`/proc/${pid}/stat`, 'utf8');
  const f = t.slice(t.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10_000;
}

async function measure(variant, storeName, setup, tmp, runNo) {
  const store =
    storeName === 'embedded'
      ? join(tmp, `embedded-${runNo}`)
      : storeName === 'redis'
        ? setup.redisUrl
        : storeName === 'postgres'
          ? PG_URL
          : storeName;
  const probeFile = join(tmp, `probe-${runNo}.jsonl`);
  const bin = join(variant.build, 'bin/fencegate.js');
  const env = { ...process.env, FG_MEM_PROBE: probeFile };
  if (opt.probe && variant.flags === null) env.NODE_OPTIONS = `${env.NODE_OPTIONS ?? ''} --import ${PROBE}`;
  const flags = opt.probe && variant.flags !== null ? [...variant.flags, '--import', PROBE] : variant.flags;
  const gw = await start(
    flags === null ? bin : process.execPath,
    [
      ...(flags === null ? [] : [...flags, bin]),
      ...serveArgs(store, setup.policies, ['--store-namespace', `mem${runNo}`]),
    ],
    LISTENING,
    env,
  );
  const pid = gw.child.pid;
  const [data, ctl] = [gw.m[1], gw.m[2]];
  await sleep(2000);
  const idle = await rssMiB(pid);
  const idleProbe = opt.probe ? { smaps: await smapsSplit(pid), ...(await snapshot(pid, probeFile)) } : null;
  const tokens = [];
  for (let i = 0; i < LOCKS; i++) {
    const lease = await control(ctl, `/v1/locks/${encodeURIComponent(`order:${i}`)}/acquire`, {
      owner: 'bench',
      ttlMs: 3_600_000,
    });
    tokens.push(lease.token);
  }
  await fenced(data, tokens, 2); // warm-up
  const samples = [];
  const sampler = setInterval(() => void rssMiB(pid).then((m) => samples.push(m)), 250);
  const cpuBefore = await cpuUs(pid);
  const logFrom = gw.output().length;
  const { rps, total } = await fenced(data, tokens, SECONDS);
  const cpu = (await cpuUs(pid)) - cpuBefore;
  const gc = gcPauses(gw.output().slice(logFrom));
  clearInterval(sampler);
  const after = await rssMiB(pid);
  const row = {
    variant: variant.name,
    store: storeName,
    rps: Math.round(rps),
    cpuUs: cpu / total,
    // With --trace-gc among the flags: main-thread GC pauses per 1 000 writes, and mark-compacts.
    scavengeMs: gc ? (gc.scavengeMs * 1000) / total : null,
    markCompactMs: gc ? (gc.markCompactMs * 1000) / total : null,
    markCompacts: gc ? gc.markCompacts : null,
    idle,
    peak: Math.max(...samples),
    mean: samples.reduce((a, b) => a + b, 0) / samples.length,
    after,
  };
  if (opt.probe) {
    row.atIdle = idleProbe;
    row.atLoad = { smaps: await smapsSplit(pid), ...(await snapshot(pid, probeFile)) };
  }
  await sleep(5000);
  row.after5s = await rssMiB(pid);
  gw.child.kill('SIGTERM');
  await once(gw.child, 'exit');
  if (opt.logs) await writeFile(join(opt.logs, `${runNo}-${variant.name}-${storeName}.log`), gw.output());
  return row;
}

async function main() {
  requireWrk();
  const tmp = await mkdtemp(join(tmpdir(), 'fg-memory-'));
  const up = await start(process.execPath, [join(ROOT, 'bench/upstream.mjs')], /listening (\S+)/);
  const policies = join(tmp, 'policies');
  await mkdir(policies);
  await writeFile(
    join(policies, 'p.yaml'),
    `version: 1\nupstreams:\n  bench: { kind: http, url: ${up.m[1]}, timeoutMs: 10000 }\nroutes:\n` +
      `  - { name: fenced-writes, methods: [PUT], path: /orders/:id, upstream: bench, lock: "order:{id}" }\n`,
  );
  const setup = { policies };
  if (STORES.includes('redis')) {
    const port = await freePort();
    await mkdir(join(tmp, 'redis'));
    await start('redis-server', durableRedisArgs(port, join(tmp, 'redis')), REDIS_READY);
    setup.redisUrl = `redis://127.0.0.1:${port}`;
  }
  const vs = await variants();
  const rows = [];
  let runNo = 0;
  for (let r = 0; r < ROUNDS; r++)
    for (const store of STORES)
      for (const v of r % 2 === 0 ? vs : [...vs].reverse()) {
        const row = await measure(v, store, setup, tmp, runNo++);
        rows.push(row);
        process.stderr.write(`${JSON.stringify(row)}\n`);
      }
  const f = (x) => x.toFixed(0);
  let out =
    `| variant | store | writes/s | gateway CPU µs/write | GC pauses ms/1k writes (scavenge + mark-compact, count) | RSS idle | peak under load | mean under load | after | 5 s after |\n` +
    `|---|---|---|---|---|---|---|---|---|---|\n`;
  const gcText = (r) =>
    r.scavengeMs === null
      ? '–'
      : `${r.scavengeMs.toFixed(0)} + ${r.markCompactMs.toFixed(0)} (${r.markCompacts})`;
  for (const r of rows)
    out += `| ${r.variant} | ${r.store} | ${r.rps} | ${f(r.cpuUs)} | ${gcText(r)} | ${f(r.idle)} | ${f(r.peak)} | ${f(r.mean)} | ${f(r.after)} | ${f(r.after5s)} |\n`;
  if (opt.probe) {
    out +=
      `\nAt idle after start and right after the load, MiB: smaps (LMDB map, node binary, other files, ` +
      `anonymous) and the process's view (heap total/used, external, array buffers, malloced; spaces physical/used)\n\n`;
    for (const r of rows.flatMap((x) => [
      { ...x.atIdle, variant: x.variant, store: `${x.store} idle` },
      { ...x.atLoad, variant: x.variant, store: `${x.store} after load` },
    ])) {
      const s = r.smaps;
      const h = r.heap;
      out +=
        `- ${r.variant} ${r.store}: lmdb ${s.lmdbMap.toFixed(1)}, node ${s.nodeBinary.toFixed(1)}, files ${s.otherFiles.toFixed(1)}, ` +
        `anon ${s.anon.toFixed(1)} (+${s.anonInFiles.toFixed(1)} in files); heap ${h.total.toFixed(1)}/${h.used.toFixed(1)}, ` +
        `external ${h.external.toFixed(1)}, arrayBuffers ${h.arrayBuffers.toFixed(1)}, malloced ${h.malloced.toFixed(1)}; ` +
        `${Object.entries(r.spaces)
          .map(([k, v]) => `${k.replace('_space', '')} ${v}`)
          .join(', ')}\n`;
    }
  }
  process.stdout.write(out);
  await rm(tmp, { recursive: true, force: true });
}

main()
  .catch((err) => {
    process.stderr.write(`memory bench failed: ${err.stack ?? err}\n`);
    process.exitCode = 1;
  })
  .finally(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
  });
