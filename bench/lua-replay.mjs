#!/usr/bin/env node
/**
 * Redis's CPU per fenced write for variants of the fence script, without the gateway:
 * captures real fence batches (8 writers admitting and finishing on 16 locks through the
 * built Redis store, seen with MONITOR) from a private redis-server (AOF appendfsync
 * always, in TMPDIR), then replays them, one call after another, with each variant in
 * turn over interleaved rounds, and reports Redis's CPU (INFO cpu) per admission and
 * finish: the smallest and the median round. ADR 0001 cites it (fg_cmp without padding).
 *
 *   node bench/lua-replay.mjs [LIB.lua+BATCH.lua ...] [--rounds 10] [--reps 8]
 *
 * A variant is a helper library and a batch script, joined as the store joins them
 * (`lib.lua` first); the default is this checkout's pair. Needs `npm run build` first.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { durableRedisArgs, freePort, REDIS_READY, spawnUntil } from './lib.mjs';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SCRIPTS = join(ROOT, 'src/store/redis/scripts');
const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: { rounds: { type: 'string', default: '10' }, reps: { type: 'string', default: '8' } },
});
const VARIANTS = positionals.length > 0 ? positionals : [`${SCRIPTS}/lib.lua+${SCRIPTS}/fence_batch.lua`];
const WRITERS = 8;
const LOCKS = 16;
const WRITES_PER_WRITER = 200;

async function startRedis(dir) {
  const port = await freePort();
  const { child } = await spawnUntil('redis-server', durableRedisArgs(port, dir), REDIS_READY);
  return { child, url: `redis://127.0.0.1:${port}` };
}

/** The fence batches the built store sends while WRITERS writers admit and finish. */
async function capture(url) {
  const { openRedisStore } = await import(join(ROOT, 'dist/store/redis/store.js'));
  const store = await openRedisStore(url, { namespace: 'replay' });
  await store.openSession('replay', 600_000);
  const locks = [];
  for (let i = 0; i < LOCKS; i++) {
    const r = await store.tryAcquire({ key: `l${i}`, owner: 'w', ttlMs: 3_600_000 });
    locks.push([`l${i}`, r.lease.token]);
  }
  const client = new Redis(url);
  const monitor = await client.monitor();
  const batches = [];
  monitor.on('monitor', (_time, args) => {
    if ((args[0] === 'evalsha' || args[0] === 'eval') && args.length > 20) batches.push(args.slice(2));
  });
  let n = 0;
  const writer = async (w) => {
    for (let k = 0; k < WRITES_PER_WRITER; k++) {
      const [lock, token] = locks[(w * 7 + k) % LOCKS];
      const requestId = `r${n++}`;
      await store.admit({ lock, token, check: 'token', requestId, session: 'replay', record: true });
      await store.finish(lock, requestId);
    }
  };
  await Promise.all(Array.from({ length: WRITERS }, (_, w) => writer(w)));
  await new Promise((r) => setTimeout(r, 300));
  monitor.disconnect();
  client.disconnect();
  await store.close();
  // numkeys, KEYS, floor, n, channels, then the operations: count the admissions.
  const admits = batches.reduce((sum, a) => {
    const keys = Number(a[0]);
    const ops = a.slice(keys + 3 + Number(a[keys + 2]));
    return sum + ops.filter((x) => x === 'a').length;
  }, 0);
  return { batches, admits };
}

async function main() {
  const dir = await mkdtemp(join(tmpdir(), 'fg-lua-replay-'));
  const server = await startRedis(dir);
  const redis = new Redis(server.url);
  try {
    const { batches, admits } = await capture(server.url);
    console.log(`${batches.length} batches captured, ${admits} admissions (and as many finishes) in them`);
    const cpu = async () => {
      const info = await redis.info('cpu');
      const field = (k) => Number(new RegExp(`${k}:([0-9.]+)`).exec(info)[1]);
      return field('used_cpu_user') + field('used_cpu_sys');
    };
    const shas = [];
    for (const v of VARIANTS) {
      const [lib, batch] = v.split('+');
      if (!batch) throw new Error(`a variant is LIB.lua+BATCH.lua, not ${v}`);
      shas.push(
        await redis.script('LOAD', `${await readFile(lib, 'utf8')}\n${await readFile(batch, 'utf8')}`),
      );
    }
    const perWrite = VARIANTS.map(() => []);
    for (let round = 0; round < Number(opt.rounds); round++) {
      for (let i = 0; i < VARIANTS.length; i++) {
        const before = await cpu();
        for (let rep = 0; rep < Number(opt.reps); rep++)
          for (const b of batches) await redis.evalsha(shas[i], ...b);
        perWrite[i].push((((await cpu()) - before) * 1e6) / (admits * Number(opt.reps)));
      }
    }
    console.log('| variant | min µs per admission + finish | median |\n|---|---|---|');
    VARIANTS.forEach((v, i) => {
      const s = [...perWrite[i]].sort((a, b) => a - b);
      console.log(`| ${v} | ${s[0].toFixed(1)} | ${s[s.length >> 1].toFixed(1)} |`);
    });
  } finally {
    redis.disconnect();
    server.child.kill();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
