// Data-plane throughput with the control plane idle, then with 1,500 event-stream
// subscribers (docs/security.md, "Control-plane limits"): `node bench/sse-flood.mjs
// [--bin PATH/bin/fencegate.js] [--seconds N]`. One `fencegate serve` (embedded store, no
// auth file, one process) in front of the bench upstream; 16 clients write for N seconds
// (default 10) through a fenced route, half with the current token and half with a stale
// one, so every other write is a refusal event sent to every subscriber. Prints writes/s
// idle and with the subscribers opened (their answers counted: 200 or 429 past the cap),
// and the bytes the subscribers received. --bin runs another build (the before figures).
// Set FENCEGATE_EVENT_STREAMS_MAX to lift the cap. Prints figures; asserts nothing.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createBenchUpstream } from './upstream.mjs';
import { control, LISTENING, serveArgs, spawnUntil } from './lib.mjs';

const { values } = parseArgs({ options: { bin: { type: 'string' }, seconds: { type: 'string' } } });
const bin = resolve(values.bin ?? 'bin/fencegate.js');
const SECONDS = Number(values.seconds ?? 10);
const SUBSCRIBERS = 1500;
const CLIENTS = 16;
const agent = new http.Agent({ keepAlive: true, maxSockets: CLIENTS });

function put(url, token) {
  return new Promise((done) => {
    const req = http.request(
      url,
      { method: 'PUT', agent, headers: { 'fencing-token': token, 'content-type': 'application/json' } },
      (res) => {
        res.resume();
        res.on('end', () => done(res.statusCode));
      },
    );
    req.on('error', () => done(0));
    req.end('{"x":1}');
  });
}

async function throughput(data, tokens) {
  let writes = 0;
  const end = performance.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, c) => {
      for (let i = 0; performance.now() < end; i++) {
        const stale = (i + c) % 2 === 1;
        const status = await put(`${data}/orders/${c}`, stale ? tokens[c].stale : tokens[c].live);
        if (status === 200 || status === 409) writes += 1;
      }
    }),
  );
  return writes / SECONDS;
}

/** Opens `n` event streams; returns their statuses, a byte counter and a closer. */
async function subscribe(controlUrl, n) {
  const statuses = {};
  const sockets = [];
  let bytes = 0;
  const streamAgent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise((done) => {
          const req = http.get(`${controlUrl}/v1/events/stream`, { agent: streamAgent }, (res) => {
            statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
            res.on('data', (d) => (bytes += d.length));
            res.on('error', () => undefined);
            sockets.push(req);
            done();
          });
          req.on('error', (err) => {
            statuses[err.code] = (statuses[err.code] ?? 0) + 1;
            done();
          });
        }),
    ),
  );
  return { statuses, bytes: () => bytes, close: () => sockets.forEach((r) => r.destroy()) };
}

const dir = await mkdtemp(join(tmpdir(), 'fg-sse-flood-'));
const children = [];
const upstream = createBenchUpstream();
try {
  await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
  await writeFile(
    join(dir, 'orders.yaml'),
    `version: 1
upstreams:
  orders: { kind: http, url: 'http://127.0.0.1:${upstream.address().port}' }
routes:
  - { name: order-writes, methods: [PUT], path: '/orders/:id', upstream: orders, lock: 'order:{id}' }
`,
  );
  const { m } = await spawnUntil(process.execPath, [bin, ...serveArgs(join(dir, 'store'), dir)], LISTENING, {
    children,
    timeoutMs: 180_000,
  });
  const [, data, controlUrl] = m;
  const tokens = [];
  for (let c = 0; c < CLIENTS; c++) {
    const key = `order:${c}`;
    const first = await control(controlUrl, `/v1/locks/${encodeURIComponent(key)}/acquire`, {
      owner: 'a',
      ttlMs: 600_000,
    });
    await control(controlUrl, `/v1/locks/${encodeURIComponent(key)}/release`, { leaseId: first.leaseId });
    const live = await control(controlUrl, `/v1/locks/${encodeURIComponent(key)}/acquire`, {
      owner: 'b',
      ttlMs: 600_000,
    });
    tokens.push({ stale: first.token, live: live.token });
    await put(`${data}/orders/${c}`, live.token); // the live token is admitted: the first one is stale from now on
  }
  await throughput(data, tokens); // warm-up
  const idle = await throughput(data, tokens);
  const subs = await subscribe(controlUrl, SUBSCRIBERS);
  const before = subs.bytes();
  const flooded = await throughput(data, tokens);
  const received = subs.bytes() - before;
  subs.close();
  console.log(
    JSON.stringify({
      fencegate: bin,
      seconds: SECONDS,
      idleWritesPerS: Math.round(idle),
      subscribers: SUBSCRIBERS,
      subscriberAnswers: subs.statuses,
      floodedWritesPerS: Math.round(flooded),
      ratio: Math.round((flooded / idle) * 1000) / 1000,
      subscriberMBReceived: Math.round(received / 1e5) / 10,
    }),
  );
} finally {
  for (const c of children) c.kill('SIGTERM');
  upstream.close();
  agent.destroy();
  await rm(dir, { recursive: true, force: true });
}
