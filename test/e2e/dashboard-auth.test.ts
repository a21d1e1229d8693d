/**
 * The dashboard on a control listener with an auth file, in headless Chromium: the page
 * loads without a credential and asks for an API key; with a key that has `read` and
 * `events` it shows the lock table and the live feed (the stream read with fetch, so it
 * carries the key); a wrong key is refused. Screenshot: test-artifacts/dashboard-auth.png.
 */
import { mkdirSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateApiKey } from '../../src/auth/keys.js';
import { ROOT, startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { deleteRedisPrefix, REDIS_URL, uniqueName } from '../helpers/stores.js';

interface PageElement {
  textContent: string | null;
}
declare const document: { getElementById(id: string): PageElement | null };

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = join(ROOT, 'test-artifacts');

describe('the dashboard behind an auth file', () => {
  let fg: FencegateProcess;
  let browser: Browser;
  let page: Page;
  let dir: string;
  const namespace = uniqueName('fgdashauth');
  const keys = { viewer: '', worker: '' };

  const text = (id: string) => page.evaluate((i) => document.getElementById(i)?.textContent ?? '', id);
  const waitText = (id: string, want: string) =>
    page.waitForFunction(
      ([i, w]: [string, string]) => (document.getElementById(i)?.textContent ?? '').includes(w),
      [id, want] as [string, string],
      {
        timeout: 15_000,
      },
    );

  async function control(path: string, body: unknown): Promise<Response> {
    return fetch(`${fg.control}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${keys.worker}` },
      body: JSON.stringify(body),
    });
  }

  beforeAll(async () => {
    dir = await tempDir('fg-dashauth-');
    const viewer = await generateApiKey();
    const worker = await generateApiKey();
    keys.viewer = viewer.key;
    keys.worker = worker.key;
    const auth = join(dir, 'auth.yaml');
    await writeFile(
      auth,
      `principals:
  - name: viewer
    keys: ['${viewer.hash}']
    grants: [{ verbs: [read, events], prefix: '*' }]
  - name: worker
    keys: ['${worker.hash}']
    grants: [{ verbs: [lease], prefix: 'jobs/' }]
`,
    );
    fg = await startFencegate(['--auth', auth, '--policies', 'test/fixtures/empty-policy.yaml'], {
      FENCEGATE_STORE: REDIS_URL,
      FENCEGATE_STORE_NAMESPACE: namespace,
      FENCEGATE_ALLOW_VOLATILE_REDIS: 'true',
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
    page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await fg?.stop();
    await rm(dir, { recursive: true, force: true });
    await deleteRedisPrefix(REDIS_URL, namespace);
  });

  it('asks for a key, then shows locks and live events with it; a wrong key is refused', async () => {
    const pageErrors: string[] = [];
    page.on('pageerror', (err) => pageErrors.push(err.message));
    await page.goto(`${fg.control}/dashboard`);
    await waitText('conn', 'API key needed');
    expect(await page.isVisible('#api-key')).toBe(true);

    await page.fill('#api-key', keys.viewer);
    await page.click('#key-use');
    await waitText('conn', 'live');
    expect(await page.isVisible('#api-key')).toBe(false);

    const lease = (await (
      await control('/v1/locks/jobs%2F1/acquire', { owner: 'w1', ttlMs: 60_000 })
    ).json()) as {
      leaseId: string;
    };
    expect(lease.leaseId).toBeTruthy();
    await waitText('locks', 'worker/w1');
    // An event: a release by a lease id that does not hold the lock, shown live.
    expect((await control('/v1/locks/jobs%2F1/release', { leaseId: 'not-the-lease' })).status).toBe(409);
    await waitText('feed', 'not-owner');
    await waitText('store-pill', 'store redis: ok');
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-auth.png') });

    // The key lasts for the tab (sessionStorage): a reload keeps working.
    await page.reload();
    await waitText('conn', 'live');

    // Forget it and give a wrong one: refused, and nothing shows.
    await page.click('#key-forget');
    await waitText('conn', 'API key needed');
    await page.fill('#api-key', (await generateApiKey()).key);
    await page.press('#api-key', 'Enter');
    await waitText('conn', 'API key refused');
    expect(await text('feed')).not.toContain('not-owner');
    expect(pageErrors).toEqual([]);
  }, 120_000);
});
