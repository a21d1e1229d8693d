/**
 * The ops dashboard in a real browser: headless Debian Chromium (/usr/bin/chromium,
 * installed by .ci/run) driven by playwright-core, against the built CLI serving the
 * sample upstream behind a fenced route. Stale writes made through the gateway must
 * show on the open page (chart and feed) within two seconds, without a reload; the lock
 * table shows the holder; a filter narrows the feed. The screenshot is saved as
 * test-artifacts/dashboard.png (docs/dashboard.png is made by `npm run docs:screenshots`).
 */
import { mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, ROOT, startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { deleteRedisPrefix, REDIS_URL, uniqueName } from '../helpers/stores.js';
import { sleep } from '../helpers/wait.js';
import { violation } from '../helpers/openapi.js';

// The functions passed to waitForFunction run in the page; this is the little of the DOM
// they use (the project's TypeScript has no DOM library).
interface PageElement {
  textContent: string | null;
  value: string;
  getBoundingClientRect(): { width: number };
  children: ArrayLike<PageElement> & Iterable<PageElement>;
  getAttribute(name: string): string | null;
}
declare const document: {
  documentElement: { scrollWidth: number; clientWidth: number };
  getElementById(id: string): PageElement | null;
  querySelector(selector: string): PageElement | null;
  querySelectorAll(selector: string): ArrayLike<PageElement> & Iterable<PageElement>;
};

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = join(ROOT, 'test-artifacts');
interface Lease {
  leaseId: string;
  token: string;
}

describe('the dashboard in headless Chromium', () => {
  let fg: FencegateProcess;
  let browser: Browser;
  let page: Page;
  let dir: string;
  /** The ledger upstream: answers 502 to every request, and never answers /ledger/slow (504 past its timeout). */
  let ledger: Server;
  const namespace = uniqueName('fgdash');
  const problems: string[] = [];

  async function acquire(key: string, owner: string, ttlMs: number): Promise<Lease> {
    const res = await fetch(`${fg.control}/v1/locks/${encodeURIComponent(key)}/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ owner, ttlMs }),
    });
    expect(res.status).toBe(200);
    return (await res.json()) as Lease;
  }

  async function write(id: string, token: string): Promise<number> {
    const res = await fetch(`${fg.data}/orders/${id}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', 'fencing-token': token },
      body: '{"status":"paid"}',
    });
    await res.arrayBuffer();
    return res.status;
  }

  /** A lock taken over from a lapsed holder: returns [the lapsed lease, the current one]. */
  async function takenOver(key: string, from: string, to: string): Promise<[Lease, Lease]> {
    const old = await acquire(key, from, 200);
    await sleep(350);
    return [old, await acquire(key, to, 120_000)];
  }

  beforeAll(async () => {
    dir = await tempDir('fg-dashboard-');
    const samplePort = await freePort();
    const deadPort = await freePort(); // nothing listens there: connection refused
    ledger = createServer((req, res) => {
      req.resume();
      if (req.url?.startsWith('/ledger/slow')) return; // never answered
      res.writeHead(502, { 'content-type': 'text/plain' }).end('ledger database down');
    });
    await new Promise<void>((r) => ledger.listen(0, '127.0.0.1', r));
    const ledgerPort = (ledger.address() as AddressInfo).port;
    const policy = join(dir, 'orders.yaml');
    await writeFile(
      policy,
      [
        'version: 1',
        'upstreams:',
        '  orders:',
        '    kind: http',
        `    url: http://127.0.0.1:${samplePort}`,
        '  ledger:',
        '    kind: http',
        `    url: http://127.0.0.1:${ledgerPort}`,
        '    timeoutMs: 300',
        '  archive:',
        '    kind: http',
        `    url: http://127.0.0.1:${deadPort}`,
        'routes:',
        '  - name: order-writes',
        '    methods: [PUT, POST, DELETE]',
        '    path: /orders/:orderId',
        '    upstream: orders',
        "    lock: 'order:{orderId}'",
        '  - name: order-reads',
        '    methods: [GET]',
        '    path: /orders/*',
        '    upstream: orders',
        '  - name: ledger-reads',
        '    methods: [GET]',
        '    path: /ledger/*',
        '    upstream: ledger',
        '  - name: archive-reads',
        '    methods: [GET]',
        '    path: /archive/*',
        '    upstream: archive',
        '',
      ].join('\n'),
    );
    fg = await startFencegate(['--sample', `127.0.0.1:${samplePort}`, '--policies', policy], {
      FENCEGATE_STORE: REDIS_URL,
      FENCEGATE_STORE_NAMESPACE: namespace,
      FENCEGATE_ALLOW_VOLATILE_REDIS: 'true',
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
    page = await browser.newPage({ viewport: { width: 1400, height: 1200 } });
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('console', (msg) => {
      if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
    });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await fg?.stop();
    ledger?.closeAllConnections();
    await new Promise((r) => ledger?.close(r));
    await rm(dir, { recursive: true, force: true });
    await deleteRedisPrefix(REDIS_URL, namespace);
  });

  it('shows stale writes live (chart and feed), the lock holder, and narrows the feed by a filter', async () => {
    await page.goto(`${fg.control}/dashboard`);
    await page.waitForFunction(() => document.getElementById('conn')?.textContent === 'live', null, {
      timeout: 10_000,
    });
    await page.waitForFunction(
      () => (document.querySelector('#routes tbody')?.children.length ?? 0) >= 2,
      null,
      {
        timeout: 10_000,
      },
    );

    const [alice, bob] = await takenOver('order:7', 'alice', 'bob');
    const [carol, dave] = await takenOver('order:8', 'carol', 'dave');
    expect(await write('7', bob.token)).toBeLessThan(300);
    expect(await write('8', dave.token)).toBeLessThan(300);
    for (let i = 0; i < 3; i++) expect(await write('7', alice.token)).toBe(409);
    expect(await write('8', carol.token)).toBe(409);

    // On the page within two seconds, without a reload: four stale writes in the feed
    // (with the owner of the presented token; alice's three, a burst, on one row) and in the chart.
    await page.waitForFunction(
      ({ aliceToken }) => {
        const rows = [...document.querySelectorAll('#feed tbody tr')].map((tr) =>
          [...tr.children].map((td) => td.textContent),
        );
        const stale = rows.filter((r) => r[3] === 'stale');
        const chart = [...document.querySelectorAll('#chart rect')].reduce(
          (n, r) => n + Number(r.getAttribute('data-count') ?? 0),
          0,
        );
        return (
          stale.length === 2 &&
          stale.reduce((n, r) => n + Number(r[2]?.slice(1)), 0) === 4 &&
          stale.some((r) => r[5] === 'order:7' && r[2] === '×3' && r[6] === aliceToken && r[8] === 'alice') &&
          stale.some((r) => r[5] === 'order:8' && r[8] === 'carol') &&
          chart >= 4 &&
          document.getElementById('chart-total')?.textContent === '4'
        );
      },
      { aliceToken: alice.token },
      { timeout: 2000 },
    );
    const topLocks = await page.locator('#top-locks tbody tr').allTextContents();
    expect(topLocks[0]).toContain('order:7');

    // How stale each refused write was, and who holds the lock now: alice's token is one
    // grant behind bob's, her lease lapsed before bob took over, and bob holds order:7.
    await page.waitForFunction(
      ({ bobToken, daveToken }) => {
        const rows = [...document.querySelectorAll('#feed tbody tr')].map((tr) =>
          [...tr.children].map((td) => td.textContent ?? ''),
        );
        const seven = rows.find((r) => r[3] === 'stale' && r[5] === 'order:7');
        const eight = rows.find((r) => r[3] === 'stale' && r[5] === 'order:8');
        const behind = /^1 grant behind · lease ended (just now|\d+ s ago)$/;
        return (
          seven !== undefined &&
          eight !== undefined &&
          behind.test(seven[7] ?? '') &&
          behind.test(eight[7] ?? '') &&
          seven[9] === `bob · ${bobToken}` &&
          eight[9] === `dave · ${daveToken}` &&
          /^\d{4}-\d{2}-\d{2} /.test(seven[10] ?? '') && // the burst's first time
          eight[10] === '–'
        );
      },
      { bobToken: bob.token, daveToken: dave.token },
      { timeout: 5000 },
    );
    // The events say it too (docs/events.md), as the OpenAPI document describes them.
    const evRes = await fetch(`${fg.control}/v1/events?reason=stale&lock=order:7&limit=1`);
    const evBody = await evRes.text();
    expect(violation('GET', '/v1/events', evRes.status, 'application/json', evBody)).toBeNull();
    const [ev] = (JSON.parse(evBody) as { events: Record<string, unknown>[] }).events;
    expect(ev).toMatchObject({
      owner: 'alice',
      behind: { grants: 1, exact: true },
      holder: { owner: 'bob', token: bob.token },
    });
    expect(Date.parse(String(ev?.leaseEndedAt))).toBeLessThanOrEqual(Date.parse(String(ev?.time)));

    // Totals agree: the chart's, by route's and by lock's are the same four fenced writes.
    const totals = await page.evaluate(() => {
      const sum = (id: string) =>
        [...document.querySelectorAll(`#${id} tbody tr`)]
          .filter((tr) => tr.children[0]?.textContent !== 'total')
          .reduce((n, tr) => n + Number(tr.children[1]?.textContent), 0);
      const total = (id: string) =>
        [...document.querySelectorAll(`#${id} tbody tr`)].find(
          (tr) => tr.children[0]?.textContent === 'total',
        )?.children[1]?.textContent;
      return [
        sum('top-routes'),
        sum('top-locks'),
        Number(total('top-routes')),
        Number(total('top-locks')),
        Number(document.getElementById('chart-total')?.textContent),
      ];
    });
    expect(totals).toEqual([4, 4, 4, 4, 4]);
    expect(await page.locator('#view-window').textContent()).toBe('last 15 min');

    // The lock table: bob holds order:7 with his token, and the highest admitted is his.
    await page.waitForFunction(
      ({ token }) =>
        [...document.querySelectorAll('#locks tbody tr')].some((tr) => {
          const c = [...tr.children].map((td) => td.textContent);
          return (
            c[0] === 'order:7' && c[1] === 'bob' && c[2] === token && c[3] === token && /s$/.test(c[4] ?? '')
          );
        }),
      { token: bob.token },
      { timeout: 5000 },
    );

    // Health: the store is up, and the upstream's circuit (made on its first request) is closed.
    await page.waitForFunction(
      () =>
        [...document.querySelectorAll('#health tbody tr')].some(
          (tr) =>
            tr.children[0]?.textContent === 'upstream orders (http)' &&
            tr.children[2]?.textContent === 'breaker closed',
        ),
      null,
      { timeout: 5000 },
    );

    // A filter narrows the feed to one lock.
    await page.fill('#f-lock', 'order:8');
    await page.waitForFunction(
      () => {
        const locks = [...document.querySelectorAll('#feed tbody tr')].map(
          (tr) => tr.children[5]?.textContent,
        );
        return locks.length > 0 && locks.every((l) => l === 'order:8');
      },
      null,
      { timeout: 2000 },
    );
    const narrowed = await page.locator('#feed tbody tr').count();
    await page.selectOption('#f-reason', 'stale');
    await page.waitForFunction(() => document.getElementById('chart-total')?.textContent === '1', null, {
      timeout: 2000,
    });
    await page.fill('#f-lock', '');
    await page.selectOption('#f-reason', '');
    await page.waitForFunction((n) => document.querySelectorAll('#feed tbody tr').length > n, narrowed, {
      timeout: 2000,
    });

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png'), fullPage: true });
    expect(problems).toEqual([]);
  }, 60_000);

  it('shows each event at its date, time and zone offset, and how long ago it was', async () => {
    const times = await page.locator('#feed tbody tr td:nth-child(2)').allTextContents();
    expect(times.length).toBeGreaterThan(0);
    for (const t of times)
      expect(t).toMatch(
        /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [+-]\d{2}:\d{2} · (just now|\d+ s ago|\d+ min ago)$/,
      );
    // The newest row's date is its event's, in the browser's zone (the test's): not a bare time.
    const shown = Number(await page.locator('#feed tbody tr td:nth-child(1)').first().textContent());
    const events = (await (await fetch(`${fg.control}/v1/events?limit=500`)).json()) as {
      events: { id: number; time: string }[];
    };
    const d = new Date(events.events.find((e) => e.id === shown)?.time ?? 0);
    const pad = (n: number) => String(n).padStart(2, '0');
    expect(times[0]?.slice(0, 19)).toBe(
      `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`,
    );
  });

  it('shows the version and uptime of the process it watches, beside the store', async () => {
    const status = (await (await fetch(`${fg.control}/v1/status`)).json()) as { version: string };
    await page.waitForFunction(
      (v) =>
        /^fencegate \S+ · up \d/.test(document.getElementById('build')?.textContent ?? '') &&
        (document.getElementById('build')?.textContent ?? '').startsWith(`fencegate ${v} · up `),
      status.version,
      { timeout: 5000 },
    );
    expect(await page.locator('#store-pill').textContent()).toMatch(/^store redis: ok$/);
    expect(problems).toEqual([]);
  });

  it('renders attacker-chosen lock keys and paths as text, never as markup', async () => {
    const key = '<img src=x onerror=alert(1)>';
    const l = await acquire(key, '<b>mallory</b>', 60_000);
    const res = await fetch(`${fg.control}/v1/locks/${encodeURIComponent(key)}/release`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ leaseId: `${l.leaseId}-not-mine` }),
    });
    expect(res.status).toBe(409);
    await page.waitForFunction(
      (k) =>
        [...document.querySelectorAll('#feed tbody tr')].some((tr) => tr.children[5]?.textContent === k) &&
        [...document.querySelectorAll('#locks tbody tr')].some((tr) => tr.children[0]?.textContent === k),
      key,
      { timeout: 5000 },
    );
    expect(await page.locator('#feed img, #locks img, #feed b, #locks b').count()).toBe(0);
    expect(problems).toEqual([]);
  });

  it('stays usable with 10,000 events and 1,000 locks: bounded rows, a paged lock table, filters that still answer', async () => {
    const pool = async <T>(n: number, width: number, task: (i: number) => Promise<T>) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: width }, async () => {
          while (next < n) await task(next++);
        }),
      );
    };
    // 1,000 locks held (the keys sort after every other lock of this test).
    await pool(1000, 25, async (i) => {
      await acquire(`zz-load:${String(i).padStart(4, '0')}`, `holder-${i}`, 120_000);
    });
    // 10,000 stale writes on 20 locks, each with a lapsed holder.
    const stale: string[] = [];
    for (let l = 0; l < 20; l++) {
      const [old, cur] = await takenOver(`order:${900 + l}`, `late-${l}`, `current-${l}`);
      expect(await write(String(900 + l), cur.token)).toBeLessThan(300);
      stale.push(old.token);
    }
    const before = Number(await page.locator('#total').textContent());
    await pool(10_000, 25, async (i) => {
      expect(await write(String(900 + (i % 20)), stale[i % 20] as string)).toBe(409);
    });

    await page.waitForFunction(
      (want) => Number(document.getElementById('total')?.textContent) >= want,
      before + 10_000,
      { timeout: 30_000 },
    );
    expect(Number(await page.locator('#buffered').textContent())).toBeLessThanOrEqual(10_000);
    expect(await page.locator('#feed tbody tr').count()).toBeLessThanOrEqual(200);

    // A filter still narrows the feed promptly, to the right lock and owner.
    await page.fill('#f-lock', 'order:905');
    await page.waitForFunction(
      () => {
        const rows = [...document.querySelectorAll('#feed tbody tr')].map((tr) =>
          [...tr.children].map((td) => td.textContent),
        );
        return rows.length > 0 && rows.every((r) => r[5] === 'order:905' && r[8] === 'late-5');
      },
      null,
      { timeout: 2000 },
    );
    await page.fill('#f-lock', '');

    // The lock table is paged: 50 rows, and the next page holds the next 50 keys. Each page is
    // a /v1/locks read over 1,000 locks while the 10,000 events still render: generous bounds,
    // since the full suite loads the machine (5 s was once too short there).
    const LOCK_PAGE_WAIT_MS = 15_000;
    await page.fill('#l-prefix', 'zz-load:');
    await page.waitForFunction(
      () => {
        const keys = [...document.querySelectorAll('#locks tbody tr')].map(
          (tr) => tr.children[0]?.textContent,
        );
        return keys.length === 50 && keys[0] === 'zz-load:0000' && keys[49] === 'zz-load:0049';
      },
      null,
      { timeout: LOCK_PAGE_WAIT_MS },
    );
    await page.click('#l-next');
    await page.waitForFunction(
      () => {
        const rows = [...document.querySelectorAll('#locks tbody tr')].map((tr) =>
          [...tr.children].map((td) => td.textContent),
        );
        return rows.length === 50 && rows[0]?.[0] === 'zz-load:0050' && rows[0]?.[1] === 'holder-50';
      },
      null,
      { timeout: LOCK_PAGE_WAIT_MS },
    );
    expect(problems).toEqual([]);
  }, 180_000);

  it('keeps its filters in the URL: a shared link opens the same view, a change updates it', async () => {
    const shared = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await shared.goto(`${fg.control}/dashboard?route=order-writes&reason=stale&lock=order%3A*&group=lock`);
      await shared.waitForFunction(
        () =>
          (document.getElementById('f-route') as unknown as { value: string } | null)?.value ===
          'order-writes',
        undefined,
        { timeout: 10_000 },
      );
      const value = (id: string) => shared.locator(`#${id}`).inputValue();
      expect([await value('f-lock'), await value('f-reason'), await value('f-group')]).toEqual([
        'order:*',
        'stale',
        'lock',
      ]);
      await shared.locator('#f-lock').fill('order:9');
      await shared.waitForURL((u) => u.searchParams.get('lock') === 'order:9', { timeout: 5000 });
      expect(new URL(shared.url()).searchParams.get('route')).toBe('order-writes');
      await shared.locator('#f-clear').click();
      await shared.waitForURL((u) => !u.searchParams.has('lock') && !u.searchParams.has('route'), {
        timeout: 5000,
      });
      expect(new URL(shared.url()).searchParams.get('group')).toBe('lock');
    } finally {
      await shared.close();
    }
  });

  it('shows the lock page last asked for when an older listing answers after it', async () => {
    for (let i = 0; i < 60; i++)
      await acquire(`race-page:${String(i).padStart(2, '0')}`, `racer-${i}`, 120_000);
    // The first listing without a prefix is held back until the prefixed one has answered
    // and is on the table: the order a slow answer to the periodic refresh arrives in.
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let held: string | null = null;
    await page.route('**/v1/locks?*', async (route) => {
      const url = new URL(route.request().url());
      if (held === null && !url.searchParams.has('prefix')) {
        held = route.request().url();
        await released;
      }
      await route.continue();
    });
    try {
      await page.fill('#l-prefix', '');
      await page.fill('#l-prefix', 'race-page:');
      const firstPage = () => {
        const keys = [...document.querySelectorAll('#locks tbody tr')].map(
          (tr) => tr.children[0]?.textContent,
        );
        return keys.length === 50 && keys[0] === 'race-page:00' && keys[49] === 'race-page:49';
      };
      await page.waitForFunction(firstPage, null, { timeout: 15_000 });
      expect(held).not.toBeNull();
      // Now the older answer (the first 50 locks of all) arrives and is read by the page.
      const finished = page.waitForEvent('requestfinished', (r) => r.url() === held);
      release();
      await finished;
      await page.evaluate(() => new Promise((r) => setTimeout(r, 100)));
      expect(await page.evaluate(firstPage)).toBe(true);
      // "Next" follows the prefixed listing, not the one that answered last.
      await page.click('#l-next');
      await page.waitForFunction(
        () => {
          const rows = [...document.querySelectorAll('#locks tbody tr')].map((tr) =>
            [...tr.children].map((td) => td.textContent),
          );
          return rows.length === 10 && rows[0]?.[0] === 'race-page:50' && rows[0]?.[1] === 'racer-50';
        },
        null,
        { timeout: 15_000 },
      );
    } finally {
      await page.unroute('**/v1/locks?*');
    }
    expect(problems).toEqual([]);
  }, 60_000);

  it('shows each upstream’s errors, latency and last error beside its breaker: 502s and 504s, not only fenced writes', async () => {
    const get = async (path: string) => {
      const res = await fetch(`${fg.data}${path}`);
      await res.arrayBuffer();
      return res.status;
    };
    // The ledger answers 502 itself, then times out (504); nothing listens for the archive (502).
    expect(await get('/ledger/1')).toBe(502);
    expect(await get('/ledger/2')).toBe(502);
    expect(await get('/ledger/slow')).toBe(504);
    expect(await get('/archive/1')).toBe(502);
    expect(await get('/orders/7')).toBeLessThan(500);

    const res = await fetch(`${fg.control}/v1/upstreams`);
    const body = await res.text();
    expect(violation('GET', '/v1/upstreams', res.status, 'application/json', body)).toBeNull();
    const upstreams = (
      JSON.parse(body) as { upstreams: { name: string; requests: number; errors: number }[] }
    ).upstreams;
    expect(upstreams.find((u) => u.name === 'ledger')).toMatchObject({
      requests: 3,
      errors: 3,
      errorRate: 1,
      lastError: { status: 504 },
    });
    expect(upstreams.find((u) => u.name === 'archive')).toMatchObject({
      errors: 1,
      lastError: { status: 502 },
    });
    expect(upstreams.find((u) => u.name === 'orders')).toMatchObject({ errors: 0, lastError: null });

    await page.waitForFunction(
      () => {
        const rows = [...document.querySelectorAll('#upstreams tbody tr')].map((tr) =>
          [...tr.children].map((td) => td.textContent ?? ''),
        );
        const ledger = rows.find((r) => r[0] === 'ledger (http)');
        const archive = rows.find((r) => r[0] === 'archive (http)');
        const orders = rows.find((r) => r[0] === 'orders (http)');
        return (
          ledger !== undefined &&
          ledger[2] === '100 %' &&
          ledger[3] === '504' &&
          ledger[4] === '3' &&
          ledger[5] === '3' &&
          /^\d+(\.\d)? ms \/ \d+(\.\d)? ms$/.test(ledger[6] ?? '') &&
          /^\d{4}-\d{2}-\d{2} .* · (just now|\d+ s ago)$/.test(ledger[8] ?? '') &&
          /did not answer in time/.test(ledger[9] ?? '') &&
          archive?.[3] === '502' &&
          /could not be reached \(ECONNREFUSED\)/.test(archive[9] ?? '') &&
          orders?.[4] === '0' &&
          orders[3] === 'none' &&
          /^breaker /.test(orders[1] ?? '')
        );
      },
      null,
      { timeout: 8000 },
    );
    expect(problems).toEqual([]);
  });

  it('keeps its time window in the URL: a shared ?since=1h opens on the last hour, a change updates the URL', async () => {
    const shared = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    try {
      await shared.goto(`${fg.control}/dashboard?since=1h&reason=stale`);
      await shared.waitForFunction(
        () => /^last hour, 60 s buckets/.test(document.getElementById('chart-caption')?.textContent ?? ''),
        null,
        { timeout: 10_000 },
      );
      expect(await shared.locator('#f-since').inputValue()).toBe('1h');
      expect(await shared.locator('#view-window').textContent()).toBe('last hour');
      await shared.selectOption('#f-since', '5m');
      await shared.waitForURL((u) => u.searchParams.get('since') === '5m', { timeout: 5000 });
      expect(new URL(shared.url()).searchParams.get('reason')).toBe('stale');
      await shared.waitForFunction(
        () => /^last 5 min, 5 s buckets/.test(document.getElementById('chart-caption')?.textContent ?? ''),
        null,
        { timeout: 5000 },
      );
      // `all`: every event the page holds, and the caption says how many that is.
      await shared.selectOption('#f-since', 'all');
      await shared.waitForURL((u) => u.searchParams.get('since') === 'all', { timeout: 5000 });
      await shared.waitForFunction(
        () => {
          const held = document.getElementById('buffered')?.textContent;
          return (
            document.getElementById('view-window')?.textContent === `all ${held} events held by this page` &&
            (document.getElementById('chart-caption')?.textContent ?? '').startsWith(`all ${held} events`)
          );
        },
        null,
        { timeout: 5000 },
      );
      // A window the page does not know is not taken: the default stays, and the URL says it.
      await shared.goto(`${fg.control}/dashboard?since=forever`);
      await shared.waitForURL((u) => u.searchParams.get('since') === '15m', { timeout: 5000 });
    } finally {
      await shared.close();
    }
  });

  it('fits a phone (420 px): no sideways scrolling of the page, the chart as wide as the screen nearly', async () => {
    const phone = await browser.newPage({ viewport: { width: 420, height: 900 } });
    try {
      await phone.goto(`${fg.control}/dashboard`);
      await phone.waitForFunction(
        () =>
          document.getElementById('conn')?.textContent === 'live' &&
          (document.querySelector('#upstreams tbody')?.children.length ?? 0) >= 3 &&
          (document.querySelector('#feed tbody')?.children.length ?? 0) > 0,
        null,
        { timeout: 10_000 },
      );
      const layout = await phone.evaluate(() => ({
        page: document.documentElement.scrollWidth,
        viewport: document.documentElement.clientWidth,
        chart: document.getElementById('chart')?.getBoundingClientRect().width ?? 0,
      }));
      expect(layout.viewport).toBeLessThanOrEqual(420);
      expect(layout.page).toBeLessThanOrEqual(layout.viewport);
      expect(layout.chart).toBeGreaterThanOrEqual(0.8 * layout.viewport);
      mkdirSync(ARTIFACTS, { recursive: true });
      await phone.screenshot({ path: join(ARTIFACTS, 'dashboard-phone.png'), fullPage: true });
    } finally {
      await phone.close();
    }
  });
});
