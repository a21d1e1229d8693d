/**
 * The README's "Try it" walk-through, run against the built CLI as `npm start` runs
 * it (example policies, sample upstream, embedded store): the paused owner's write is
 * refused with 409 and never reaches the service. The sample runs on a free port, not
 * `npm start`'s 127.0.0.1:9000: `--sample` alone moves it, and the example policy's
 * url (`${FENCEGATE_SAMPLE:-127.0.0.1:9000}`) follows it, unedited.
 */
import { rm } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { sleep } from '../helpers/wait.js';

let fg: FencegateProcess;
let dir: string;
let sample: string;
beforeAll(async () => {
  dir = await tempDir('fg-demo-');
  sample = `127.0.0.1:${await freePort()}`;
  fg = await startFencegate(['--store', dir, '--policies', 'policies', '--sample', sample]);
});
afterAll(async () => {
  await fg?.stop();
  await rm(dir, { recursive: true, force: true });
});

const json = { 'content-type': 'application/json' };

async function acquire(owner: string, ttlMs: number) {
  const res = await fetch(`${fg.control}/v1/locks/order%3A42/acquire`, {
    method: 'POST',
    headers: json,
    body: JSON.stringify({ owner, ttlMs }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { token: string; leaseId: string };
}

const put = (token: string, status: string) =>
  fetch(`${fg.data}/orders/42`, {
    method: 'PUT',
    headers: { ...json, 'fencing-token': token },
    body: JSON.stringify({ status }),
  });

describe('README walk-through', () => {
  it('refuses the paused owner and keeps the newer write', async () => {
    const a = await acquire('worker-a', 300);
    expect((await put(a.token, 'packing')).ok).toBe(true);
    await sleep(400); // A pauses past its lease
    const b = await acquire('worker-b', 10_000);
    expect(BigInt(b.token)).toBeGreaterThan(BigInt(a.token));
    expect((await put(b.token, 'shipped')).ok).toBe(true);

    const stale = await put(a.token, 'packing');
    expect(stale.status).toBe(409);
    expect(stale.headers.get('content-type')).toContain('application/problem+json');
    expect(await stale.json()).toMatchObject({
      type: 'urn:fencegate:stale-token',
      lock: 'order:42',
      token: a.token,
      highest: b.token,
    });
    const order = await fetch(`${fg.data}/orders/42`);
    expect(await order.json()).toMatchObject({ id: '42', body: { status: 'shipped' } });

    // The service saw exactly two writes, A's first and B's.
    const writes = (await (await fetch(`http://${sample}/_writes`)).json()) as {
      fencingToken: string;
    }[];
    expect(writes.map((w) => w.fencingToken)).toEqual([a.token, b.token]);

    const lease = await fetch(`${fg.control}/v1/locks/order%3A42/renew`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ leaseId: b.leaseId, ttlMs: 10_000 }),
    });
    expect(lease.status).toBe(200);
    const rel = await fetch(`${fg.control}/v1/locks/order%3A42/release`, {
      method: 'POST',
      headers: json,
      body: JSON.stringify({ leaseId: b.leaseId }),
    });
    expect(await rel.json()).toEqual({ released: true });
  });

  it('counts the refusal in /metrics', async () => {
    const m = await (await fetch(`${fg.control}/metrics`)).text();
    expect(m).toMatch(/fencegate_fenced_writes_total\{[^}]*route="order-writes"[^}]*reason="stale"[^}]*\} 1/);
  });
});
