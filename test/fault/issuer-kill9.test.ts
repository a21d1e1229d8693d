/**
 * kill -9 the fencegate process while clients acquire on the embedded store,
 * restart it on the same directory, and show that no token is ever reissued and
 * every acknowledged grant survived: per key, acknowledged tokens strictly increase.
 */
import { rm } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { sleep } from '../helpers/wait.js';

let server: FencegateProcess | null = null;
let dir = '';
afterEach(async () => {
  await server?.kill();
  server = null;
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function post(
  base: string,
  path: string,
  body: unknown,
): Promise<{ status: number; json: Record<string, string> }> {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(5000),
  });
  return { status: res.status, json: (await res.json()) as Record<string, string> };
}

describe('kill -9 on the embedded store', () => {
  it('never reissues a token across crashes and restarts', async () => {
    dir = await tempDir('fg-kill9-');
    const keys = ['k0', 'k1', 'k2'];
    const acked = new Map<string, bigint[]>(keys.map((k) => [k, []]));
    let control = '';
    let running = true;

    const worker = async (w: number) => {
      let i = 0;
      while (running) {
        const key = keys[(w + i++) % keys.length] as string;
        try {
          const a = await post(control, `/v1/locks/${key}/acquire`, {
            owner: `w${w}`,
            ttlMs: 300,
            waitMs: 2000,
          });
          if (a.status !== 200) continue;
          acked.get(key)?.push(BigInt(a.json.token as string));
          await post(control, `/v1/locks/${key}/release`, { leaseId: a.json.leaseId });
        } catch {
          await sleep(20); // server down: try again after the restart
        }
      }
    };

    const ackedCount = () => [...acked.values()].reduce((n, t) => n + t.length, 0);
    for (let round = 0; round < 4; round++) {
      server = await startFencegate(['--store', dir, '--policies', 'test/fixtures/empty-policy.yaml']);
      control = server.control;
      if (round === 0) void Promise.all([0, 1, 2, 3].map(worker));
      // Kill mid-load: once this round has acknowledged a few grants (bounded wait), at a random moment.
      const target = ackedCount() + 4;
      const until = Date.now() + 30_000;
      while (ackedCount() < target && Date.now() < until) await sleep(20);
      await sleep(Math.random() * 300);
      await server.kill('SIGKILL');
    }
    running = false;
    server = await startFencegate(['--store', dir, '--policies', 'test/fixtures/empty-policy.yaml']);
    // One more grant per key after the last crash, above everything acknowledged before.
    for (const key of keys) {
      const a = await post(server.control, `/v1/locks/${key}/acquire`, {
        owner: 'final',
        ttlMs: 300,
        waitMs: 2000,
      });
      expect(a.status).toBe(200);
      acked.get(key)?.push(BigInt(a.json.token as string));
    }
    let total = 0;
    for (const [key, tokens] of acked) {
      total += tokens.length;
      for (let i = 1; i < tokens.length; i++) {
        if (!((tokens[i] as bigint) > (tokens[i - 1] as bigint))) {
          throw new Error(`${key}: token ${tokens[i]} acknowledged after ${tokens[i - 1]}`);
        }
      }
    }
    expect(total).toBeGreaterThan(keys.length * 4);
  }, 90_000);
});
