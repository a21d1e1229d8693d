/**
 * An open-loop, evenly paced load generator for latency at a given rate.
 *
 * autocannon's rate limit lets each connection send its share of a second's requests
 * back to back and then wait for the next second, so "latency at N req/s" is really
 * latency inside a burst at full speed. Here request i is due at start + i/rate; every
 * millisecond the requests that are due are sent (over a pool of keep-alive
 * connections), and latency is measured from when a request was due, not from when it
 * could be sent, so a server that falls behind is charged for the queue it causes (no
 * coordinated omission). Bounded: it stops sending after `seconds` and waits at most
 * `graceMs` for the last answers.
 */
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

/**
 * @param {string} origin e.g. http://127.0.0.1:8080
 * @param {{ rate: number, seconds: number, connections?: number, graceMs?: number,
 *           request: (i: number) => { path: string, headers: Record<string, string>, body: string } }} opts
 */
export async function paced(origin, opts) {
  const { rate, seconds, connections = 32, graceMs = 10_000 } = opts;
  const pool = new Pool(origin, { connections, pipelining: 1 });
  const total = Math.floor(rate * seconds);
  const latencies = new Float64Array(total);
  let sent = 0;
  let answered = 0;
  let bad = 0;
  const start = performance.now() + 5;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));

  const send = (i) => {
    const due = start + (i * 1000) / rate;
    const { path, headers, body } = opts.request(i);
    pool.request({ method: 'PUT', path, headers, body }).then(
      async (res) => {
        await res.body.dump();
        if (res.statusCode < 200 || res.statusCode >= 300) bad++;
        latencies[answered++] = performance.now() - due;
        if (answered === total) finish();
      },
      () => {
        bad++;
        latencies[answered++] = performance.now() - due;
        if (answered === total) finish();
      },
    );
  };

  const ticker = setInterval(() => {
    const dueNow = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1);
    while (sent < dueNow) send(sent++);
    if (sent >= total) clearInterval(ticker);
  }, 1);
  const timedOut = await Promise.race([
    finished.then(() => false),
    new Promise((r) => setTimeout(() => r(true), seconds * 1000 + graceMs)),
  ]);
  clearInterval(ticker);
  const elapsed = (performance.now() - start) / 1000;
  await pool.destroy();
  const got = latencies.subarray(0, answered).sort();
  const pct = (p) => (got.length === 0 ? NaN : got[Math.min(got.length - 1, Math.floor(p * got.length))]);
  return {
    offered: rate,
    rps: answered / elapsed,
    total: answered,
    bad: bad + (timedOut ? total - answered : 0),
    p50: pct(0.5),
    p99: pct(0.99),
    max: got.length === 0 ? NaN : got[got.length - 1],
  };
}
