/**
 * An open-loop, evenly paced load generator for latency at a given rate, run in a process
 * of its own (`pacedGenerator()` spawns `node bench/paced.mjs`, which takes one job per
 * line of JSON on stdin and answers one line of JSON on stdout).
 *
 * Open loop, no coordinated omission: request i is due at start + i/rate; every
 * millisecond the requests that are due are sent (over a pool of keep-alive connections,
 * kept per origin from one job to the next), and latency is measured from when a request
 * was due, not from when it could be sent, so a server that falls behind is charged for the
 * queue it causes. (autocannon's rate limit lets each connection send its share of a
 * second's requests back to back and then wait for the next second, so "latency at N req/s"
 * would be latency inside a burst at full speed.)
 *
 * Why a process of its own: a generator inside the bench's process shares its event loop and
 * heap with whatever ran before (autocannon's histograms and result objects, tens of MiB),
 * and every millisecond it lags is added to the latency of every request due meanwhile. The
 * generator's own lag is measured and returned beside the figures, so a reader can tell the
 * servers' tail from the generator's: `sendLagP99Ms` (how late requests left after they were
 * due) and `eldP99Ms`/`eldMaxMs` (perf_hooks.monitorEventLoopDelay at 1 ms resolution, which
 * also delays reading answers). Bounded: a job stops sending after `seconds` and waits at most
 * `graceMs` for the last answers.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';

const pools = new Map();
const pool = (origin, connections) => {
  const key = `${origin} ${connections}`;
  if (!pools.has(key)) pools.set(key, new Pool(origin, { connections, pipelining: 1 }));
  return pools.get(key);
};

/**
 * @param {{ origin: string, rate: number, seconds: number, connections?: number, graceMs?: number,
 *           base?: string, tokens?: string[] | null, locks?: number }} job
 * PUT /{base}/{i % locks} with a 90-byte JSON body, and lock i's token when given.
 */
export async function paced(job) {
  const { origin, rate, seconds, connections = 32, graceMs = 10_000, base = 'orders', tokens = null } = job;
  const locks = job.locks ?? 16;
  const body = JSON.stringify({ status: 'shipped', note: 'x'.repeat(64) });
  const requests = Array.from({ length: locks }, (_, i) => ({
    method: 'PUT',
    path: `/${base}/${i}`,
    headers: tokens
      ? { 'content-type': 'application/json', 'fencing-token': tokens[i] }
      : { 'content-type': 'application/json' },
    body,
  }));
  const p = pool(origin, connections);
  const total = Math.floor(rate * seconds);
  const latencies = new Float64Array(total);
  const service = new Float64Array(total);
  const sendLags = new Float64Array(total);
  let sent = 0;
  let answered = 0;
  let bad = 0;
  const eld = monitorEventLoopDelay({ resolution: 1 });
  const cpuBefore = process.cpuUsage();
  const start = performance.now() + 5;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));

  const send = (i) => {
    const due = start + (i * 1000) / rate;
    const at = performance.now();
    sendLags[i] = at - due;
    const done = (ok) => {
      if (!ok) bad++;
      const now = performance.now();
      service[answered] = now - at;
      latencies[answered++] = now - due;
      if (answered === total) finish();
    };
    p.request(requests[i % locks]).then(
      async (res) => {
        await res.body.dump();
        done(res.statusCode >= 200 && res.statusCode < 300);
      },
      () => done(false),
    );
  };

  eld.enable();
  const ticker = setInterval(() => {
    const dueNow = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
    while (sent < dueNow) send(sent++);
    if (sent >= total) clearInterval(ticker);
  }, 1);
  let timer;
  const timedOut = await Promise.race([
    finished.then(() => false),
    new Promise((r) => (timer = setTimeout(() => r(true), seconds * 1000 + graceMs))),
  ]);
  clearTimeout(timer);
  clearInterval(ticker);
  eld.disable();
  const elapsed = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const sorted = (a) => a.sort();
  const got = sorted(latencies.subarray(0, answered));
  const svc = sorted(service.subarray(0, answered));
  const lags = sorted(sendLags.subarray(0, sent));
  const pct = (a, q) => (a.length === 0 ? NaN : a[Math.min(a.length - 1, Math.floor(q * a.length))]);
  return {
    offered: rate,
    rps: answered / elapsed,
    total: answered,
    bad: bad + (timedOut ? total - answered : 0),
    p50: pct(got, 0.5),
    p99: pct(got, 0.99),
    p999: pct(got, 0.999),
    max: got.length === 0 ? NaN : got[got.length - 1],
    // From the moment the request left (so without the generator's send lag), for reading only.
    serviceP99: pct(svc, 0.99),
    sendLagP99Ms: pct(lags, 0.99),
    sendLagMaxMs: lags.length === 0 ? NaN : lags[lags.length - 1],
    eldP50Ms: eld.percentile(50) / 1e6,
    eldP99Ms: eld.percentile(99) / 1e6,
    eldMaxMs: eld.max / 1e6,
    cpuUsPerRequest: (cpu.user + cpu.system) / Math.max(1, answered),
    // Every latency, for pooling slices of the same setup (see latencies in run.mjs).
    latencies: Array.from(got, (v) => Math.round(v * 1000) / 1000),
  };
}

/**
 * Starts the generator process. `cpus` (e.g. "1") pins it with taskset.
 * Returns { pid, run(job) → result, close() }; jobs run one at a time.
 */
export async function pacedGenerator({ cpus = null, cwd = process.cwd() } = {}) {
  const script = fileURLToPath(import.meta.url);
  // A small heap of its own: the generator allocates little, and a small young generation
  // keeps its scavenges short.
  const args = ['--max-semi-space-size=4', script];
  const child = cpus
    ? spawn('taskset', ['-c', cpus, process.execPath, ...args], { cwd, stdio: ['pipe', 'pipe', 'inherit'] })
    : spawn(process.execPath, args, { cwd, stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout });
  const waiting = [];
  lines.on('line', (line) => waiting.shift()?.(JSON.parse(line)));
  child.on('exit', () => {
    for (const w of waiting.splice(0)) w({ error: 'paced generator exited' });
  });
  return {
    pid: child.pid,
    run(job) {
      return new Promise((resolve, reject) => {
        waiting.push((r) => (r.error ? reject(new Error(r.error)) : resolve(r)));
        child.stdin.write(`${JSON.stringify(job)}\n`);
      });
    },
    async close() {
      if (child.exitCode !== null) return;
      child.stdin.end();
      await once(child, 'exit');
    },
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  // One job at a time, in order.
  let chain = Promise.resolve();
  const input = createInterface({ input: process.stdin });
  input.on('line', (line) => {
    chain = chain.then(async () => {
      let out;
      try {
        out = await paced(JSON.parse(line));
      } catch (err) {
        out = { error: String(err?.stack ?? err) };
      }
      process.stdout.write(`${JSON.stringify(out)}\n`);
    });
  });
  input.on('close', () =>
    chain.then(async () => {
      for (const p of pools.values()) await p.destroy();
    }),
  );
}
