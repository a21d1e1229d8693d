/**
 * `fencegate epoch bump` as an operator runs it after a restore (docs/operations.md,
 * "Backup and restore"): it names the store it acts on, never creates one, refuses a
 * store that running gateways use unless told --force, prints the whole procedure, and
 * ends what it supersedes: a lease granted before it is not renewed (the SDK's
 * lock.signal fires) and its token is refused as stale.
 */
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { writeFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FencegateClient, LeaseLostError } from '../../src/client/index.js';
import { startSampleUpstream, type SampleUpstream } from '../../src/sample/index.js';
import { policyYaml } from '../helpers/e2e.js';
import { runCli, startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { sleep } from '../helpers/wait.js';

let dir: string;
let fg: FencegateProcess | null = null;
let sample: SampleUpstream | null = null;

beforeAll(async () => {
  dir = await tempDir('fg-bump-');
  sample = await startSampleUpstream({ host: '127.0.0.1', port: 0 });
  const policy = join(dir, 'policy.yaml');
  await writeFile(
    policy,
    policyYaml(sample.url, [{ name: 'orders', methods: ['PUT'], path: '/orders/:id', lock: 'order:{id}' }]),
  );
  fg = await startFencegate(['--store', join(dir, 'store'), '--policies', policy]);
}, 120_000);

afterAll(async () => {
  await fg?.stop();
  await sample?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('fencegate epoch bump', () => {
  it('requires --store, and refuses a store that does not exist without creating it', async () => {
    const none = await runCli(['epoch', 'bump']);
    expect(none.code).toBe(2);
    expect(none.stderr).toBe('fencegate: epoch bump: --store is required (the store you restored)\n');
    const typo = join(dir, 'no-such-store');
    const missing = await runCli(['epoch', 'bump', '--store', typo]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/there is no embedded store there/);
    expect(existsSync(typo)).toBe(false);
  });

  it('refuses a store live gateways use; with --force it bumps, prints the procedure, and ends older leases', async () => {
    const g = fg as FencegateProcess;
    const client = new FencegateClient({ url: g.control });
    const lock = await client.acquire('order:7', { owner: 'before-the-bump', ttlMs: 1500, autoRenew: true });
    const put = (token: string) =>
      fetch(`${g.data}/orders/7`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', 'fencing-token': token },
        body: '{"status":"packing"}',
      });
    expect((await put(lock.fencingToken)).ok).toBe(true);

    const refused = await runCli(['epoch', 'bump', '--store', join(dir, 'store')]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/1 gateway session\(s\) are beating on .*pass --force/);
    expect(refused.stderr).toMatch(/1\. stop every fencegate process/);

    const bumped = await runCli(['epoch', 'bump', '--store', join(dir, 'store'), '--force']);
    expect(bumped.stderr).toBe('');
    expect(bumped.code).toBe(0);
    expect(bumped.stdout).toMatch(/^new epoch \S+ on .*: every token from now on is above \d+\n/);
    expect(bumped.stdout).toMatch(/3\. fencegate epoch bump --store STORE/);

    // The holder's next renewal is refused: the SDK's signal fires and work stops.
    await new Promise<void>((resolve) => {
      if (lock.signal.aborted) resolve();
      else lock.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    expect(lock.signal.reason).toBeInstanceOf(LeaseLostError);
    // Its token is below the new floor: refused as stale (after the gateway's lock-delay for the reset).
    let status = 0;
    for (let i = 0; i < 100; i++) {
      status = (await put(lock.fencingToken)).status;
      if (status !== 503) break;
      await sleep(200);
    }
    expect(status).toBe(409);
    // The lock is free at once for the next owner, above the floor.
    const next = await client.acquire('order:7', { owner: 'after-the-bump', ttlMs: 10_000 });
    expect(BigInt(next.fencingToken)).toBeGreaterThan(BigInt(lock.fencingToken));
    await next.release();
  }, 60_000);
});
