/**
 * DNS rebinding against the control listener, in a real browser: headless Debian
 * Chromium (/usr/bin/chromium) driven by playwright-core, with `rebind.test` resolved to
 * 127.0.0.1 by a host-resolver rule, as an attacker's DNS would after the page loaded.
 * The attacker's page is served as `http://rebind.test:<control port>/`, so to the
 * browser the control API is same-origin: no CORS stands in the way, only the Host its
 * requests carry. fencegate without an auth file answers loopback names only, so the
 * page gets 421 host-not-allowed and takes no lock; the same page against a listener told
 * `--allowed-hosts rebind.test` does take one, which shows the page's requests do reach
 * the listener. docs/security.md, "DNS rebinding".
 */
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';

const CHROMIUM = '/usr/bin/chromium';
const PRIVATE_NETWORK_CHECKS = [
  'BlockInsecurePrivateNetworkRequests',
  'PrivateNetworkAccessSendPreflights',
  'PrivateNetworkAccessRespectPreflightResults',
  'LocalNetworkAccessChecks',
];

/** What the attacker's page does once its name points at 127.0.0.1: take a lock, list every lock. */
const ATTACK = `<!doctype html><title>cute cats</title><script>
window.attack = async () => {
  const acquire = await fetch('/v1/locks/order%3Arebound/acquire', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"owner":"evil","ttlMs":60000}',
  });
  const list = await fetch('/v1/locks');
  return { acquire: acquire.status, acquireBody: await acquire.text(), list: list.status, listBody: await list.text() };
};
</script>`;

interface AttackResult {
  acquire: number;
  acquireBody: string;
  list: number;
  listBody: string;
}

describe('DNS rebinding in headless Chromium', () => {
  let dir: string;
  let browser: Browser;
  const processes: FencegateProcess[] = [];
  let started = 0;

  async function serve(args: string[]): Promise<FencegateProcess> {
    const store = join(dir, `store-${(started += 1)}`);
    await mkdir(store);
    // In a directory without ./policies: the issuer alone, no route proxied.
    const fg = await startFencegate(['--store', store, ...args], {}, 120_000, dir);
    processes.push(fg);
    return fg;
  }

  /** Loads the attacker's page as http://rebind.test:<port>/ and runs its attack. */
  async function attack(fg: FencegateProcess): Promise<AttackResult> {
    const port = new URL(fg.control).port;
    const page = await browser.newPage();
    try {
      const origin = `http://rebind.test:${port}`;
      // The first load came from the attacker's server: only the page itself is served here;
      // every request the page makes goes to the network, where rebind.test is 127.0.0.1.
      await page.route(`${origin}/`, (route) => route.fulfill({ contentType: 'text/html', body: ATTACK }));
      await page.goto(`${origin}/`).catch((err: unknown) => {
        throw new Error(`the attack page did not load: ${err instanceof Error ? err.message : String(err)}`);
      });
      return (await page.evaluate('window.attack()').catch((err: unknown) => {
        // The page's own stack names page URLs, which the test runner cannot map: the message only.
        throw new Error(`the attack page failed: ${err instanceof Error ? err.message : String(err)}`);
      })) as AttackResult;
    } finally {
      await page.close();
    }
  }

  beforeAll(async () => {
    dir = await tempDir('fg-rebind-');
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--host-resolver-rules=MAP rebind.test 127.0.0.1',
        // Chromium's own private/local network checks would stop a page it took for a public
        // one (the page here is served by the test, not from an address) from calling
        // 127.0.0.1; other browsers, and older Chromiums, have none. Off, so what is shown
        // is fencegate's own defence.
        `--disable-features=${PRIVATE_NETWORK_CHECKS.join(',')}`,
      ],
    });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    for (const fg of processes) await fg.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('a page on another host cannot take a lock or list locks on a default control listener', async () => {
    const fg = await serve([]);
    const r = await attack(fg);
    expect(r.acquire).toBe(421);
    expect(JSON.parse(r.acquireBody)).toMatchObject({ type: 'urn:fencegate:host-not-allowed' });
    expect(r.list).toBe(421);
    expect(r.listBody).not.toContain('order:rebound');
    // Seen from the machine itself: no lock was taken.
    const state = await fetch(`${fg.control}/v1/locks/order%3Arebound`);
    expect(state.status).toBe(404);
  }, 120_000);

  it('the same page does reach a listener told to answer for its name (the attack is real)', async () => {
    const fg = await serve(['--allowed-hosts', 'rebind.test']);
    const r = await attack(fg);
    expect(r.acquire).toBe(200);
    expect(JSON.parse(r.acquireBody)).toMatchObject({ key: 'order:rebound', owner: 'evil' });
    expect(r.list).toBe(200);
    expect(r.listBody).toContain('order:rebound');
  }, 120_000);
});
