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
import { connect } from 'node:net';

/**
 * A minimal HTTP/1.1 keep-alive client: `connections` sockets, one request in flight on each,
 * requests that find no idle socket wait in order. Requests are pre-serialised buffers and an
 * answer is only read as far as its status and its end (Content-Length, or a chunked body's
 * last chunk). In interleaved runs against undici's Pool (the generator before) it took
 * 49–106 µs of CPU per request against 74–297 µs (1 500–3 000 req/s, loaded host; a part of
 * either is the 1 ms timer), which leaves more of the 2 cores to the processes under test.
 */
class RawPool {
  constructor(origin, connections) {
    const url = new URL(origin);
    this.host = url.hostname;
    this.port = Number(url.port);
    this.idle = [];
    this.waiting = [];
    this.sockets = [];
    for (let i = 0; i < connections; i++) this.idle.push(this.open());
  }

  open() {
    const socket = connect({ host: this.host, port: this.port, noDelay: true });
    const conn = { socket, buf: '', current: null, connected: false };
    socket.on('connect', () => (conn.connected = true));
    socket.setEncoding('latin1');
    socket.on('data', (d) => {
      conn.buf += d;
      this.parse(conn);
    });
    const fail = () => {
      const cur = conn.current;
      conn.current = null;
      cur?.done(0);
      this.sockets = this.sockets.filter((s) => s !== socket);
      this.idle = this.idle.filter((c) => c !== conn);
      // A connection the server closed is replaced; one that never connected is not retried.
      if (!this.closed && conn.connected) this.release(this.open());
    };
    socket.on('error', () => undefined);
    socket.on('close', fail);
    this.sockets.push(socket);
    return conn;
  }

  /** Reads every complete answer in conn.buf (one at a time: one request in flight). */
  parse(conn) {
    while (conn.current) {
      const head = conn.buf.indexOf('\r\n\r\n');
      if (head < 0) return;
      const status = Number(conn.buf.slice(9, 12));
      const headers = conn.buf.slice(0, head).toLowerCase();
      let end;
      const length = /\r\ncontent-length: *([0-9]+)/.exec(headers);
      if (length) {
        end = head + 4 + Number(length[1]);
        if (conn.buf.length < end) return;
      } else if (headers.includes('transfer-encoding: chunked')) {
        const last = conn.buf.indexOf('\r\n0\r\n\r\n', head + 2);
        if (last < 0) return;
        end = last + 7;
      } else {
        end = head + 4; // no body (204, 304)
      }
      conn.buf = conn.buf.slice(end);
      const cur = conn.current;
      conn.current = null;
      this.release(conn);
      cur.done(status);
    }
  }

  release(conn) {
    const next = this.waiting.shift();
    if (next) this.send(conn, next);
    else this.idle.push(conn);
  }

  send(conn, req) {
    conn.current = req;
    req.sentAt = performance.now();
    conn.socket.write(req.bytes);
  }

  /** `done(status)` is called with the answer's status, or 0 when the connection failed. */
  request(bytes, done) {
    const req = { bytes, done, sentAt: 0 };
    const conn = this.idle.pop();
    if (conn) this.send(conn, req);
    else this.waiting.push(req);
    return req;
  }

  destroy() {
    this.closed = true;
    for (const s of this.sockets) s.destroy();
  }
}

const pools = new Map();
const pool = (origin, connections) => {
  const key = `${origin} ${connections}`;
  if (!pools.has(key)) pools.set(key, new RawPool(origin, connections));
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
  const host = new URL(origin).host;
  const requests = Array.from({ length: locks }, (_, i) =>
    Buffer.from(
      `PUT /${base}/${i} HTTP/1.1\r\nhost: ${host}\r\ncontent-type: application/json\r\n` +
        (tokens ? `fencing-token: ${tokens[i]}\r\n` : '') +
        `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      'latin1',
    ),
  );
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
    // How late the generator's timer got to it (waiting for a free connection is not counted:
    // that is the server's queue, and is in the latency).
    sendLags[i] = performance.now() - due;
    const req = p.request(requests[i % locks], (status) => {
      if (status < 200 || status >= 300) bad++;
      const now = performance.now();
      service[answered] = now - req.sentAt;
      latencies[answered++] = now - due;
      if (answered === total) finish();
    });
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
      for (const p of pools.values()) p.destroy();
    }),
  );
}
