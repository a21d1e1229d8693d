/**
 * A running `fencegate serve` picks up policy changes: when a file in the policy
 * directory changes, and on SIGHUP. A bad edit is reported (file:line:col) and the
 * last good policy keeps serving; fencing keeps working across reloads.
 */
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSampleUpstream, type SampleUpstream } from '../../src/sample/index.js';
import {
  acquire,
  expectProblem,
  policyYaml,
  send,
  twoTokens,
  uid,
  waitFor,
  writeAtomically,
  type RouteSpec,
  startFencegate,
} from '../helpers/e2e.js';
import { tempDir, type FencegateProcess } from '../helpers/procs.js';

let upstream: SampleUpstream;
let dir: string;
let file: string;
let fg: FencegateProcess;

const writes: RouteSpec = {
  name: 'order-writes',
  methods: ['PUT'],
  path: '/orders/:orderId',
  lock: 'order:{orderId}',
};
const reads: RouteSpec = { name: 'order-reads', methods: ['GET', 'HEAD'], path: '/orders/*' };
const history: RouteSpec = { name: 'write-history', methods: ['GET'], path: '/_writes' };
const deletes: RouteSpec = {
  name: 'order-deletes',
  methods: ['DELETE'],
  path: '/orders/:orderId',
  lock: 'order:{orderId}',
};

const RELOADED = /policies reloaded \((\d+) routes\)/g;
const count = (re: RegExp) => [...fg.output().matchAll(re)].length;

/** Whether the gateway has a route for GET /_writes (the upstream answers a JSON array). */
async function historyRouted(): Promise<boolean> {
  const r = await send(fg.data, 'GET', '/_writes');
  if (r.status === 404) {
    expectProblem(r, 404, 'no-route');
    return false;
  }
  expect(r.status).toBe(200);
  expect(Array.isArray(r.json())).toBe(true);
  return true;
}

beforeAll(async () => {
  upstream = await startSampleUpstream({ port: 0 });
  dir = await tempDir('fg-e2e-reload-');
  file = join(dir, 'policies', 'orders.yaml');
  await mkdir(join(dir, 'policies'));
  await writeAtomically(file, policyYaml(upstream.url, [writes, reads]));
  fg = await startFencegate(['--store', join(dir, 'store'), '--policies', join(dir, 'policies')]);
}, 120_000);

afterAll(async () => {
  await fg?.stop();
  await upstream?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
}, 60_000);

describe('policy reload in a running serve', () => {
  it('reloads when a policy file changes: a new route starts matching', async () => {
    expect(await historyRouted()).toBe(false);
    await writeAtomically(file, policyYaml(upstream.url, [writes, reads, history]));
    await waitFor('the new route to match after the file changed', historyRouted, 30_000);
    await waitFor(
      'the reload to be logged',
      () => /policies reloaded \(3 routes\)/.test(fg.output()),
      10_000,
    );
  }, 60_000);

  it('reloads on SIGHUP', async () => {
    const before = count(/SIGHUP: policies reloaded/g);
    const id = uid('o');
    expectProblem(await send(fg.data, 'DELETE', `/orders/${id}`), 404, 'no-route');
    await writeAtomically(file, policyYaml(upstream.url, [writes, reads, history, deletes]));
    fg.proc.kill('SIGHUP');
    await waitFor(
      'the SIGHUP reload to be logged',
      () => count(/SIGHUP: policies reloaded \(4 routes\)/g) > before,
      30_000,
    );
    // The route added is fenced, and shares its lock with the writes route.
    const grant = await acquire(fg.control, `order:${id}`, 'w');
    expect((await send(fg.data, 'PUT', `/orders/${id}`, { token: grant.token })).status).toBe(201);
    expectProblem(await send(fg.data, 'DELETE', `/orders/${id}`), 428, 'token-required');
    expect((await send(fg.data, 'DELETE', `/orders/${id}`, { token: grant.token })).status).toBe(204);
  }, 60_000);

  it('reports a bad edit and keeps serving the last good policy, on file change and on SIGHUP', async () => {
    const failuresBefore = count(/policy reload failed, keeping the last good policy/g);
    const id = uid('o');
    const [low, high] = await twoTokens(fg.control, `order:${id}`);
    expect((await send(fg.data, 'PUT', `/orders/${id}`, { token: high.token })).status).toBe(201);

    // Line 6 (timeoutMs) gets a string: a schema error with file, line, column and field.
    const good = policyYaml(upstream.url, [writes, reads, history, deletes]);
    const bad = good.replace(/timeoutMs: \d+/, 'timeoutMs: soon');
    expect(bad).not.toBe(good);
    await writeAtomically(file, bad);
    const where = `${file}:6:16: upstreams.orders.timeoutMs: must be an integer (got "soon")`;
    await waitFor(
      'the failed reload to be reported',
      () => count(/policy reload failed, keeping the last good policy/g) > failuresBefore,
      30_000,
    );
    const failed = fg.logs().filter((l) => /policy reload failed/.test(l.msg));
    expect(failed.at(-1)).toMatchObject({
      level: 50,
      reload: { outcome: 'failure', trigger: 'watch', errors: [where] },
    });

    fg.proc.kill('SIGHUP');
    await waitFor(
      'the failed SIGHUP reload to be reported',
      () => /SIGHUP: policy reload failed, keeping the last good policy/.test(fg.output()),
      30_000,
    );

    // Still the last good policy: every route of it works, and the fence still holds.
    expect(await historyRouted()).toBe(true);
    expect(fg.proc.exitCode).toBeNull();
    expect((await send(fg.data, 'GET', `/orders/${id}`)).status).toBe(200);
    expectProblem(await send(fg.data, 'PUT', `/orders/${id}`, { token: low.token }), 409, 'stale-token');
    expect((await send(fg.data, 'PUT', `/orders/${id}`, { token: high.token })).status).toBe(200);

    // Fixed: the next save loads again; a route removed stops matching, the fence is unchanged.
    const reloadsBefore = count(RELOADED);
    await writeAtomically(file, policyYaml(upstream.url, [writes, reads]));
    await waitFor(
      'the fixed policy to load',
      async () => count(RELOADED) > reloadsBefore && !(await historyRouted()),
      30_000,
    );
    expectProblem(await send(fg.data, 'PUT', `/orders/${id}`, { token: low.token }), 409, 'stale-token');

    // Every reload is counted by outcome: the two failures (file change, SIGHUP) and the successes.
    const metrics = await (await fetch(`${fg.control}/metrics`)).text();
    const reloads = (outcome: string) =>
      Number(
        new RegExp(`^fencegate_policy_reloads_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(
          metrics,
        )?.[1],
      );
    expect(reloads('failure')).toBe(2);
    expect(reloads('success')).toBe(count(RELOADED));
    // The route added by a reload got its series (at 0 until used); a removed one's stay.
    expect(metrics).toMatch(
      /^fencegate_fenced_writes_total\{route="order-deletes",reason="stale",enforced="true"\} 0$/m,
    );
  }, 90_000);
});
