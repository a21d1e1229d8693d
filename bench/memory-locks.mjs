#!/usr/bin/env node
/**
 * Whether the gateway's memory grows with the number of distinct locks it has seen (issue 30,
 * item 5): a built `fencegate serve --workers 1` (bin/fencegate.js, after `npm run build`) on
 * the embedded store (default) or a private Redis, with one fenced route on an in-process
 * upstream, takes N distinct locks, each acquired through the issuer API, written once through
 * the gateway with its token and released, 32 at a time. After 10 000 and after 200 000 locks
 * the gateway idles (nothing is forced: no GC, no housekeeping call) and its VmRSS is read from
 * /proc/PID/status. Prints one JSON line {rss10kMiB, rss200kMiB, deltaMiB, store, ...}.
 * `measureLockMemory(opts)` is the same measurement for the bench runner to call as a row.
 *
 *   node bench/memory-locks.mjs [embedded|redis]
 *
 * FG_MEM_LOCKS_RETENTION_MS sets the embedded store's `lockRetentionMs` (idle lock records
 * retired after that long: docs/stores-embedded.md, "Retiring idle locks"); unset, the
 * default (15 min, longer than a run, so nothing is retired during it).
 *
 * FG_MEM_LOCKS_NODE_OPTIONS adds Node options to the gateway (e.g.
 * `--heapsnapshot-signal=SIGUSR2` to look at what is held; FG_MEM_LOCKS_SNAPSHOT=1 then sends
 * the signal at each reading, and the snapshots land in the gateway's working directory).
 */
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { createBenchUpstream } from './upstream.mjs';
import { durableRedisArgs, freePort, LISTENING, REDIS_READY, serveArgs, spawnUntil } from './lib.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function rssMiB(pid, field = 'VmRSS') {
  const s = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(s)[1]) / 1024;
}

/** Anonymous (heap, malloc) and file-backed (Node's binary, the LMDB map) parts of VmRSS. */
async function rssParts(pid) {
  return { anon: await rssMiB(pid, 'RssAnon'), file: await rssMiB(pid, 'RssFile') };
}

/** The benchmarks' upstream (bench/upstream.mjs), in this process. */
async function upstream() {
  const server = createBenchUpstream();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, url: `http://127.0.0.1:${server.address().port}` };
}

async function call(pool, method, path, headers, body) {
  const res = await pool.request({ method, path, headers, body });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`${method} ${path}: ${res.statusCode} ${text}`);
  return text;
}

/** One lock's life: acquire, one fenced write with its token, release. */
async function oneLock(ctl, data, id) {
  const key = `order:${id}`;
  const json = { 'content-type': 'application/json' };
  const lease = JSON.parse(
    await call(
      ctl,
      'POST',
      `/v1/locks/${encodeURIComponent(key)}/acquire`,
      json,
      JSON.stringify({ owner: 'bench', ttlMs: 60_000 }),
    ),
  );
  await call(data, 'PUT', `/orders/${id}`, { ...json, 'fencing-token': lease.token }, '{"v":1}');
  await call(
    ctl,
    'POST',
    `/v1/locks/${encodeURIComponent(key)}/release`,
    json,
    JSON.stringify({ leaseId: lease.leaseId }),
  );
}

/** Locks `from`..`to`-1, `concurrency` at a time. */
async function drive(ctl, data, tag, from, to, concurrency) {
  let next = from;
  const worker = async () => {
    while (next < to) await oneLock(ctl, data, `${tag}-${next++}`);
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

/**
 * Starts a gateway on `store` ('embedded' or 'redis'), drives `small` then `large` distinct
 * locks in total, idling `idleMs` before each reading. Resolves to {rss10kMiB, rss200kMiB,
 * deltaMiB, store, ...} (the names keep the defaults' sizes; `small` and `large` are in the row).
 */
export async function measureLockMemory(opts = {}) {
  const {
    store = 'embedded',
    small = 10_000,
    large = 200_000,
    concurrency = 32,
    idleMs = 10_000,
    lockRetentionMs = null,
    nodeOptions = process.env.FG_MEM_LOCKS_NODE_OPTIONS ?? '',
    snapshot = process.env.FG_MEM_LOCKS_SNAPSHOT === '1',
    log = () => {},
  } = opts;
  const children = [];
  const tmp = await mkdtemp(join(tmpdir(), 'fg-memory-locks-'));
  const up = await upstream();
  const pools = [];
  try {
    const policies = join(tmp, 'policies');
    await mkdir(policies);
    await writeFile(
      join(policies, 'p.yaml'),
      `version: 1\nupstreams:\n  bench: { kind: http, url: ${up.url}, timeoutMs: 10000 }\nroutes:\n` +
        `  - { name: fenced-writes, methods: [PUT], path: /orders/:id, upstream: bench, lock: "order:{id}" }\n`,
    );
    let storeArg = join(tmp, 'embedded');
    if (store === 'redis') {
      const port = await freePort();
      await mkdir(join(tmp, 'redis'));
      await spawnUntil('redis-server', durableRedisArgs(port, join(tmp, 'redis')), REDIS_READY, {
        children,
      });
      storeArg = `redis://127.0.0.1:${port}`;
    } else if (store !== 'embedded') throw new Error(`store: embedded or redis, got ${store}`);
    const env = { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} ${nodeOptions}`.trim() };
    if (lockRetentionMs !== null) env.FENCEGATE_LOCK_RETENTION_MS = String(lockRetentionMs);
    const gw = await spawnUntil(join(ROOT, 'bin/fencegate.js'), serveArgs(storeArg, policies), LISTENING, {
      children,
      env,
      cwd: tmp,
    });
    const pid = gw.child.pid;
    const data = new Pool(gw.m[1], { connections: concurrency });
    const ctl = new Pool(gw.m[2], { connections: concurrency });
    pools.push(data, ctl);
    const tag = Math.random().toString(36).slice(2, 8);
    const reading = async (n) => {
      await sleep(idleMs);
      if (snapshot) {
        process.kill(pid, 'SIGUSR2');
        await sleep(5_000);
      }
      const rss = await rssMiB(pid);
      const parts = await rssParts(pid);
      log(
        `${store}: ${n} distinct locks, RSS ${rss.toFixed(1)} MiB (anon ${parts.anon.toFixed(1)}, file ${parts.file.toFixed(1)})`,
      );
      return { rss, ...parts };
    };
    await sleep(1_000);
    const startMiB = await rssMiB(pid);
    let t = Date.now();
    await drive(ctl, data, tag, 0, small, concurrency);
    log(`${store}: ${small} locks in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    const atSmall = await reading(small);
    t = Date.now();
    for (let done = small; done < large; done += 10_000) {
      await drive(ctl, data, tag, done, Math.min(large, done + 10_000), concurrency);
      log(`${store}: ${Math.min(large, done + 10_000)} locks, RSS ${(await rssMiB(pid)).toFixed(1)} MiB`);
    }
    log(`${store}: ${large - small} more locks in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    const atLarge = await reading(large);
    const round = (x) => Math.round(x * 10) / 10;
    return {
      rss10kMiB: round(atSmall.rss),
      rss200kMiB: round(atLarge.rss),
      deltaMiB: round(atLarge.rss - atSmall.rss),
      store,
      lockRetentionMs,
      // Of the delta: anonymous memory (the JS heap, malloc) and file pages mapped (LMDB's data file).
      anonDeltaMiB: round(atLarge.anon - atSmall.anon),
      fileDeltaMiB: round(atLarge.file - atSmall.file),
      startMiB: round(startMiB),
      small,
      large,
      output: gw.output().slice(-2000),
    };
  } finally {
    await Promise.all(pools.map((p) => p.close()));
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
    await Promise.all(children.map((c) => (c.exitCode === null ? once(c, 'exit') : null)));
    up.server.close();
    up.server.closeAllConnections();
    if (!snapshot) await rm(tmp, { recursive: true, force: true });
    else log(`heap snapshots kept in ${tmp}`);
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const store = process.argv[2] ?? 'embedded';
  const small = Number(process.env.FG_MEM_LOCKS_SMALL ?? 10_000);
  const large = Number(process.env.FG_MEM_LOCKS_LARGE ?? 200_000);
  const retention = process.env.FG_MEM_LOCKS_RETENTION_MS;
  const lockRetentionMs = retention === undefined ? null : Number(retention);
  measureLockMemory({ store, small, large, lockRetentionMs, log: (m) => process.stderr.write(`${m}\n`) })
    .then((r) => {
      const { output: _output, ...row } = r;
      process.stdout.write(`${JSON.stringify(row)}\n`);
    })
    .catch((err) => {
      process.stderr.write(`memory-locks bench failed: ${err.stack ?? err}\n`);
      process.exitCode = 1;
    });
}
