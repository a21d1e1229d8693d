/**
 * Latency at a fixed rate, several setups compared fairly on a shared, noisy machine
 * (bench/run.mjs's latency rows; method in bench/RESULTS.md):
 *
 *   - the load comes from bench/paced.mjs's open-loop generator in a process of its own
 *     (latency from when each request was due: no coordinated omission);
 *   - the setups take turns in short slices (e.g. 5 × 2 s each, the order rotated every
 *     round), so that another tenant's burst on the host, a GC of the store, or the disk
 *     hits every setup alike instead of whichever row happened to run then; each setup's
 *     latencies are pooled over its slices for its percentiles;
 *   - beside every setup's figures: the generator's own lag (send lag p99, event-loop delay
 *     p99/max), the host's CPU pressure over its slices (/proc/pressure/cpu "some": the share
 *     of time at least one runnable task waited for a core; other tenants included) and the
 *     CPU per request of every process (/proc), so that a tail can be told apart from the
 *     machine's.
 */
import { readFile } from 'node:fs/promises';

/** Total µs that some task waited for a CPU (PSI), or null without /proc/pressure. */
async function cpuPressureUs() {
  const text = await readFile('/proc/pressure/cpu', 'utf8').catch(() => null);
  const m = text && /^some .*total=(\d+)/m.exec(text);
  return m ? Number(m[1]) : null;
}

const pct = (sorted, q) =>
  sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

/**
 * @param gen       a started pacedGenerator()
 * @param setups    { name: job } (job: origin, base, tokens; see paced.mjs; `probe`, optional:
 *                  an async function returning counters, read before and after each of the
 *                  setup's slices, whose differences are summed into the result's `probe`;
 *                  `pids`, optional: { role: pid } of the setup's own processes)
 * @param opts      { rate, slices, sliceSeconds, warmupSeconds, connections,
 *                    pids: { role: pid } common to all setups, cpuUs: (pid) => Promise<µs> }
 * @returns { name: { rps, total, bad, p50, p99, p999, max, sliceP99: [..], sendLagP99Ms,
 *            eldP99Ms, eldMaxMs, pressurePct, cpu: { role: µs per request } } }
 */
export async function interleaved(gen, setups, opts) {
  const { rate, slices, sliceSeconds, warmupSeconds = 2, connections = 32, pids, cpuUs } = opts;
  const names = Object.keys(setups);
  for (const name of names) {
    const { probe: _probe, pids: _pids, ...job } = setups[name];
    await gen.run({ ...job, rate, seconds: warmupSeconds, connections });
  }
  const acc = Object.fromEntries(
    names.map((n) => [
      n,
      {
        latencies: [],
        total: 0,
        bad: 0,
        elapsed: 0,
        sliceP99: [],
        lag: 0,
        eld99: 0,
        eldMax: 0,
        pressure: 0,
        cpu: {},
        probe: {},
      },
    ]),
  );
  for (let round = 0; round < slices; round++) {
    // Rotate the order so that no setup always follows the same one.
    const order = names.map((_, i) => names[(i + round) % names.length]);
    for (const name of order) {
      const a = acc[name];
      const { probe, pids: own = {}, ...job } = setups[name];
      // The processes common to every setup, and the setup's own (its proxy, its store).
      const roles = { ...pids, ...own };
      const before = {};
      for (const [role, pid] of Object.entries(roles)) before[role] = await cpuUs(pid);
      const probeBefore = probe ? await probe() : {};
      const pressureBefore = await cpuPressureUs();
      const t0 = performance.now();
      const r = await gen.run({ ...job, rate, seconds: sliceSeconds, connections });
      const wall = performance.now() - t0;
      const pressureAfter = await cpuPressureUs();
      if (probe) {
        for (const [k, v] of Object.entries(await probe()))
          a.probe[k] = (a.probe[k] ?? 0) + v - (probeBefore[k] ?? 0);
      }
      for (const [role, pid] of Object.entries(roles)) {
        a.cpu[role] = (a.cpu[role] ?? 0) + ((await cpuUs(pid)) - before[role]);
      }
      if (pressureBefore !== null && pressureAfter !== null)
        a.pressure += (pressureAfter - pressureBefore) / 1000;
      a.elapsed += wall;
      a.latencies.push(...r.latencies);
      a.total += r.total;
      a.bad += r.bad;
      a.sliceP99.push(r.p99);
      a.lag = Math.max(a.lag, r.sendLagP99Ms);
      a.eld99 = Math.max(a.eld99, r.eldP99Ms);
      a.eldMax = Math.max(a.eldMax, r.eldMaxMs);
    }
  }
  const out = {};
  for (const name of names) {
    const a = acc[name];
    const sorted = Float64Array.from(a.latencies).sort();
    out[name] = {
      offered: rate,
      rps: a.total / (a.elapsed / 1000),
      total: a.total,
      bad: a.bad,
      p50: pct(sorted, 0.5),
      p99: pct(sorted, 0.99),
      p999: pct(sorted, 0.999),
      max: sorted.length === 0 ? NaN : sorted[sorted.length - 1],
      sliceP99: a.sliceP99,
      sendLagP99Ms: a.lag,
      eldP99Ms: a.eld99,
      eldMaxMs: a.eldMax,
      pressurePct: (100 * a.pressure) / a.elapsed,
      cpu: Object.fromEntries(Object.entries(a.cpu).map(([role, us]) => [role, us / Math.max(1, a.total)])),
      probe: a.probe,
    };
  }
  return out;
}
