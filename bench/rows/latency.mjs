/**
 * Latency at half the bare proxy's saturation rate, then at half the fenced Redis row's: the
 * paced generator in its own process (ctx.gen, closed by the runner), the setups interleaved
 * in slices (bench/latency.mjs), beside a second Redis whose AOF is on tmpfs (a diagnostic:
 * the difference is the disk's fsync), with Redis's LATENCY HISTORY of AOF fsyncs.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { Redis } from 'ioredis';
import { interleaved } from '../latency.mjs';
import { pacedGenerator } from '../paced.mjs';
import { freePort } from '../lib.mjs';
import {
  acquireTokens,
  admitBuckets,
  CONNECTIONS,
  fencegate,
  GENERATOR_CPUS,
  LATENCY_SECONDS,
  LATENCY_SLICES,
  ROOT,
  slowFsyncs,
  startRedis,
  stop,
  treeCpuUs,
} from '../core.mjs';

export default {
  name: 'latency',
  groups: ['latency'],
  async run(ctx) {
    const { r, say, upstream, bare, redis, redisChild, tokens } = ctx;
    const gen = await pacedGenerator({ cwd: ROOT, cpus: GENERATOR_CPUS });
    ctx.gen = gen;
    // The same fenced writes on a second Redis whose AOF (appendfsync always) is on tmpfs, where
    // an fsync costs nothing: the difference from the row above is the disk's fsync; from the
    // bare proxy, the rest of fencing. A diagnostic only (tmpfs is not durable).
    let shm = null;
    const shmDir = await mkdtemp('/dev/shm/fg-bench-').catch(() => null);
    if (shmDir) {
      const port = await freePort();
      const child = await startRedis(port, shmDir);
      const gw = await fencegate(`redis://127.0.0.1:${port}`, ctx.policyDir);
      shm = { dir: shmDir, port, child, gw, tokens: await acquireTokens(gw.control, 'order') };
    }
    const probe = new Redis(`redis://127.0.0.1:${ctx.redisPort}`);
    const shmProbe = shm && new Redis(`redis://127.0.0.1:${shm.port}`);
    const setups = (withDirect) => ({
      ...(withDirect ? { 'direct upstream': { origin: upstream } } : {}),
      'bare proxy': { origin: bare.m[1], pids: { proxy: bare.child.pid } },
      'fenced, redis': {
        origin: redis.data,
        tokens,
        pids: { proxy: redis.child.pid, store: redisChild.pid },
        probe: () => admitBuckets(redis.control),
      },
      ...(shm
        ? {
            'fenced, redis AOF on tmpfs': {
              origin: shm.gw.data,
              tokens: shm.tokens,
              pids: { proxy: shm.gw.child.pid, store: shm.child.pid },
              probe: () => admitBuckets(shm.gw.control),
            },
          }
        : {}),
    });
    const latencyOpts = (rate) => ({
      rate,
      slices: LATENCY_SLICES,
      sliceSeconds: LATENCY_SECONDS / LATENCY_SLICES,
      connections: CONNECTIONS,
      pids: { upstream: ctx.upstreamChild.pid, 'load generator': gen.pid },
      cpuUs: treeCpuUs,
    });
    const measure = async (rate, withDirect) => {
      await probe.call('LATENCY', 'RESET');
      await shmProbe?.call('LATENCY', 'RESET');
      const out = await interleaved(gen, setups(withDirect), latencyOpts(rate));
      return {
        out,
        fsyncs: { disk: await slowFsyncs(probe), tmpfs: shmProbe ? await slowFsyncs(shmProbe) : null },
      };
    };
    try {
      say(`latency at ${r.half} req/s …`);
      ({ out: r.latency, fsyncs: r.fsyncs } = await measure(r.half, true));
      // The goal's rate is only a latency measurement if fenced writes keep up with it; when
      // they saturate below it, the comparison is also made at a rate both sustain.
      r.sustained = Math.max(100, Math.floor(r.redisResult.rps / 2));
      say(`latency at ${r.sustained} req/s (half the fenced saturation rate) …`);
      ({ out: r.latencySustained } = await measure(r.sustained, false));
    } finally {
      probe.disconnect();
      shmProbe?.disconnect();
      if (shm) {
        await stop(shm.gw.child);
        await stop(shm.child);
        await rm(shm.dir, { recursive: true, force: true });
      }
    }
    return [];
  },
};
