#!/usr/bin/env node
// Regenerates docs/dashboard.png and docs/dashboard-phone.png: `npm run docs:screenshots`
// (builds first). It starts the built CLI (`fencegate serve --workers 2`, the embedded
// store in a temporary directory, the sample upstream), a "ledger" upstream that answers
// 502 and times out (504) and an "archive" upstream nobody listens for (502), then makes
// an incident: a takeover storm (on 6 locks the holder's lease lapses, another takes over,
// and the old holder keeps writing: four bursts of stale writes, some two grants behind) and
// requests to the dead upstreams. Then headless Chromium (/usr/bin/chromium, or $CHROMIUM)
// shows the dashboard at 1400 px and at 420 px and the pages are saved. Nothing outside
// 127.0.0.1 is used; everything it starts is stopped.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { createServer as netServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

/* global document */ // in the functions run in the page

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const LOCKS = 6;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function freePort() {
  const s = netServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

async function startGateway(dir, policy, samplePort) {
  const args = [
    join(ROOT, 'bin/fencegate.js'),
    'serve',
    '--listen',
    '127.0.0.1:0',
    '--control',
    '127.0.0.1:0',
    '--log-level',
    'warn',
    '--store',
    join(dir, 'store'),
    '--workers',
    '2',
    '--sample',
    `127.0.0.1:${samplePort}`,
    '--policies',
    policy,
  ];
  const proc = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  const end = Date.now() + 60_000;
  let m;
  while (!(m = /listening data=([^\s"]+) control=([^\s"]+)/.exec(out))) {
    if (proc.exitCode !== null) throw new Error(`fencegate exited ${proc.exitCode}: ${out}`);
    if (Date.now() > end) throw new Error(`fencegate did not start: ${out}`);
    await sleep(50);
  }
  const ready = Date.now() + 30_000;
  // The data listener answers once the workers are ready.
  while ((await fetch(`${m[2]}/readyz`).catch(() => null))?.status !== 200) {
    if (Date.now() > ready) throw new Error(`fencegate not ready: ${out}`);
    await sleep(100);
  }
  return { proc, data: m[1], control: m[2] };
}

async function main() {
  const dir = await mkdtemp(join(tmpdir(), 'fg-screenshots-'));
  const ledger = createServer((req, res) => {
    req.resume();
    if (req.url.startsWith('/ledger/slow')) return; // never answered: 504 past the timeout
    res.writeHead(502, { 'content-type': 'text/plain' }).end('ledger database down');
  });
  await new Promise((r) => ledger.listen(0, '127.0.0.1', r));
  const samplePort = await freePort();
  const deadPort = await freePort();
  const policy = join(dir, 'incident.yaml');
  await writeFile(
    policy,
    [
      'version: 1',
      'upstreams:',
      '  orders: { kind: http, url: "http://127.0.0.1:' + samplePort + '" }',
      '  ledger: { kind: http, url: "http://127.0.0.1:' + ledger.address().port + '", timeoutMs: 400 }',
      '  archive: { kind: http, url: "http://127.0.0.1:' + deadPort + '" }',
      'routes:',
      '  - { name: order-writes, methods: [PUT, POST, DELETE], path: "/orders/:orderId", upstream: orders, lock: "order:{orderId}" }',
      '  - { name: order-reads, methods: [GET], path: "/orders/*", upstream: orders }',
      '  - { name: ledger-entries, methods: [GET, POST], path: "/ledger/*", upstream: ledger }',
      '  - { name: archive-reads, methods: [GET], path: "/archive/*", upstream: archive }',
      '',
    ].join('\n'),
  );
  let fg = null;
  let browser = null;
  try {
    fg = await startGateway(dir, policy, samplePort);
    const acquire = async (key, owner, ttlMs) => {
      const res = await fetch(`${fg.control}/v1/locks/${encodeURIComponent(key)}/acquire`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ owner, ttlMs }),
      });
      if (res.status !== 200) throw new Error(`acquire ${key}: ${res.status} ${await res.text()}`);
      return res.json();
    };
    const write = async (id, token) => {
      const res = await fetch(`${fg.data}/orders/${id}`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', 'fencing-token': token },
        body: '{"status":"paid"}',
      });
      await res.arrayBuffer();
      return res.status;
    };
    const get = async (path) =>
      (await fetch(`${fg.data}${path}`).then((r) => r.arrayBuffer().then(() => r))).status;

    // The takeover storm: on each lock a worker's lease lapses (a GC pause, say) and another
    // takes over; on every other lock a third takes over again, so the first is two behind.
    const stale = [];
    for (let i = 0; i < LOCKS; i++) {
      const id = String(1000 + i);
      const late = await acquire(`order:${id}`, `billing-${i}`, 200);
      await sleep(300);
      let current = await acquire(`order:${id}`, `billing-${i + LOCKS}`, i % 2 === 0 ? 200 : 120_000);
      if (i % 2 === 0) {
        await sleep(300);
        current = await acquire(`order:${id}`, `billing-${i + 2 * LOCKS}`, 120_000);
      }
      await write(id, current.token);
      stale.push([id, late.token]);
    }
    let refused = 0;
    // Four bursts, 12 s apart (more than the 10 s that groups a burst on one row).
    for (let round = 0; round < 4; round++) {
      if (round > 0) await sleep(12_000);
      for (const [n, [id, token]] of stale.entries()) {
        for (let k = 0; k <= (n + round) % 4; k++) if ((await write(id, token)) === 409) refused += 1;
      }
    }
    // The dead upstreams: the ledger answers 502, then times out; nothing listens for the archive.
    const failures = [];
    for (let i = 0; i < 14; i++) failures.push(await get(`/ledger/${i}`));
    for (let i = 0; i < 3; i++) failures.push(await get(`/ledger/slow-${i}`));
    for (let i = 0; i < 4; i++) failures.push(await get(`/archive/${i}`));
    for (let i = 0; i < 6; i++) await get(`/orders/${1000 + i}`);
    console.log(`stale writes refused: ${refused}; upstream answers: ${failures.join(' ')}`);

    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
    const shoot = async (width, height, file) => {
      const page = await browser.newPage({ viewport: { width, height } });
      await page.goto(`${fg.control}/dashboard?since=5m&group=lock`);
      await page.waitForFunction(
        () =>
          document.getElementById('conn')?.textContent === 'live' &&
          [...document.querySelectorAll('#upstreams tbody tr')].some(
            (tr) => tr.children[3]?.textContent === '504',
          ) &&
          [...document.querySelectorAll('#feed tbody tr')].some((tr) =>
            / behind/.test(tr.children[7]?.textContent ?? ''),
          ),
        null,
        { timeout: 20_000 },
      );
      await sleep(3500); // the holders looked up (GET /v1/locks/{key}) and drawn
      await page.screenshot({ path: join(ROOT, 'docs', file), fullPage: true });
      await page.close();
      console.log(`wrote docs/${file}`);
    };
    await shoot(1400, 1100, 'dashboard.png');
    await shoot(420, 900, 'dashboard-phone.png');
  } finally {
    await browser?.close();
    if (fg !== null && fg.proc.exitCode === null) {
      fg.proc.kill('SIGTERM');
      await once(fg.proc, 'exit');
    }
    ledger.closeAllConnections();
    await new Promise((r) => ledger.close(r));
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
