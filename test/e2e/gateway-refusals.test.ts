/**
 * Every refusal the gateway documents, through one `fencegate serve` process on the
 * embedded store, in front of the sample upstream: status, problem type and fields,
 * and — the point of a fence — that a refused write never reaches the upstream.
 * Shadow mode forwards what it would refuse, and counts it.
 *
 * One lock per order id (`order:{orderId}`), with a route per method so that one
 * policy covers each fencing setting:
 *   PUT    → check: token (enforced)      PATCH → check: lease (enforced)
 *   POST   → enforce: false (shadow)      GET   → unfenced reads
 */
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSampleUpstream, type SampleUpstream } from '../../src/sample/index.js';
import {
  acquire,
  appliedIds,
  expectProblem,
  metricValue,
  policyYaml,
  rawRequest,
  send,
  sleep,
  twoTokens,
  uid,
  startFencegate,
} from '../helpers/e2e.js';
import { tempDir, type FencegateProcess } from '../helpers/procs.js';

let upstream: SampleUpstream;
let dir: string;
let fg: FencegateProcess;
/** X-Request-Id of every write the gateway refused; none may show up at the upstream. */
const refused: string[] = [];
/** X-Request-Id of every write that should have been forwarded. */
const forwarded: string[] = [];

beforeAll(async () => {
  upstream = await startSampleUpstream({ port: 0 });
  dir = await tempDir('fg-e2e-refusals-');
  const policy = join(dir, 'policy.yaml');
  await writeFile(
    policy,
    policyYaml(upstream.url, [
      { name: 'order-writes', methods: ['PUT'], path: '/orders/:orderId', lock: 'order:{orderId}' },
      {
        name: 'order-leased',
        methods: ['PATCH'],
        path: '/orders/:orderId',
        lock: 'order:{orderId}',
        fencing: { check: 'lease' },
      },
      {
        name: 'order-shadow',
        methods: ['POST'],
        path: '/orders/:orderId',
        lock: 'order:{orderId}',
        fencing: { enforce: false },
      },
      { name: 'order-reads', methods: ['GET', 'HEAD'], path: '/orders/*' },
    ]),
  );
  fg = await startFencegate(['--store', join(dir, 'store'), '--policies', policy]);
}, 120_000);

afterAll(async () => {
  await fg?.stop();
  await upstream?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
}, 60_000);

/** A write expected to be refused; its id is checked against the upstream's log at the end. */
async function refusedWrite(method: string, path: string, token?: string) {
  const requestId = uid('refused');
  refused.push(requestId);
  return send(fg.data, method, path, { requestId, ...(token === undefined ? {} : { token }) });
}

async function forwardedWrite(method: string, path: string, token: string) {
  const requestId = uid('ok');
  forwarded.push(requestId);
  const r = await send(fg.data, method, path, { requestId, token });
  expect([200, 201], r.text).toContain(r.status);
  return r;
}

describe('gateway refusals (one process, embedded store)', () => {
  it('409 stale-token with token and highest', async () => {
    const id = uid('o');
    const [a, b] = await twoTokens(fg.control, `order:${id}`);
    await forwardedWrite('PUT', `/orders/${id}`, b.token);
    const body = expectProblem(await refusedWrite('PUT', `/orders/${id}`, a.token), 409, 'stale-token');
    expect(body).toMatchObject({ lock: `order:${id}`, token: a.token, highest: b.token });
    // The fence stays where it was: the current holder keeps writing.
    await forwardedWrite('PUT', `/orders/${id}`, b.token);
  });

  it('428 token-required without a Fencing-Token', async () => {
    const id = uid('o');
    await acquire(fg.control, `order:${id}`, 'w');
    const body = expectProblem(await refusedWrite('PUT', `/orders/${id}`), 428, 'token-required');
    expect(body).toMatchObject({ lock: `order:${id}` });
  });

  it.each([
    ['a sign', '+5'],
    ['a leading zero', '042'],
    ['a non-digit', '4x2'],
    ['more than 2^63-1', '9223372036854775808'],
    ['a negative number', '-1'],
  ])('400 token-malformed for %s', async (_what, token) => {
    const id = uid('o');
    await acquire(fg.control, `order:${id}`, 'w');
    expectProblem(await refusedWrite('PUT', `/orders/${id}`, token), 400, 'token-malformed');
  });

  it('400 token-malformed for an empty token and for two Fencing-Token headers (raw socket)', async () => {
    const id = uid('o');
    const grant = await acquire(fg.control, `order:${id}`, 'w');
    const host = new URL(fg.data).host;
    const cases = [
      [`fencing-token: ${grant.token}`, `Fencing-Token: ${grant.token}`], // equal values, still twice
      [`fencing-token: ${grant.token}`, `fencing-token: ${BigInt(grant.token) + 1n}`],
      ['fencing-token: '],
    ];
    for (const tokenHeaders of cases) {
      const requestId = uid('raw');
      refused.push(requestId);
      const bodyText = '{"raw":true}';
      const res = await rawRequest(
        fg.data,
        [
          `PUT /orders/${id} HTTP/1.1`,
          `Host: ${host}`,
          'Content-Type: application/json',
          `Content-Length: ${bodyText.length}`,
          `X-Request-Id: ${requestId}`,
          ...tokenHeaders,
          'Connection: close',
          '',
          bodyText,
        ].join('\r\n'),
      );
      expect(res.status, `${tokenHeaders.join(' / ')}: ${res.head}`).toBe(400);
      expect(res.head).toMatch(/\r\ncontent-type: application\/problem\+json/i);
      expect(JSON.parse(res.body)).toMatchObject({ type: 'urn:fencegate:token-malformed', status: 400 });
    }
    // A well-formed request with the same token still goes through: nothing moved.
    await forwardedWrite('PUT', `/orders/${id}`, grant.token);
  });

  it('403 token-invalid for a token never issued, for this lock or at all', async () => {
    const id = uid('o');
    const grant = await acquire(fg.control, `order:${id}`, 'w');
    // From the future: above every token issued for the lock.
    const forged = (BigInt(grant.token) + 1000n).toString();
    expect(
      expectProblem(await refusedWrite('PUT', `/orders/${id}`, forged), 403, 'token-invalid'),
    ).toMatchObject({
      lock: `order:${id}`,
    });
    // A lock that was never granted.
    expectProblem(await refusedWrite('PUT', `/orders/${uid('never')}`, grant.token), 403, 'token-invalid');
    // The forged token did not move the fence: the genuine one is still admitted.
    await forwardedWrite('PUT', `/orders/${id}`, grant.token);
  });

  it('409 lease-expired under check: lease, even when nobody took the lock over', async () => {
    const id = uid('o');
    const live = await acquire(fg.control, `order:${id}`, 'w1', 200);
    await sleep(600); // past the lease, judged by the store's clock
    const body = expectProblem(
      await refusedWrite('PATCH', `/orders/${id}`, live.token),
      409,
      'lease-expired',
    );
    expect(body).toMatchObject({ lock: `order:${id}` });
    // A live lease is admitted on the same route (after creating the order, which PATCH needs).
    const fresh = await acquire(fg.control, `order:${id}`, 'w2');
    await forwardedWrite('PUT', `/orders/${id}`, fresh.token);
    await forwardedWrite('PATCH', `/orders/${id}`, fresh.token);
  });

  it('404 no-route for requests no route matches', async () => {
    expectProblem(await refusedWrite('DELETE', `/orders/${uid('o')}`), 404, 'no-route');
    expectProblem(await refusedWrite('PUT', '/elsewhere/1'), 404, 'no-route');
    expectProblem(await send(fg.data, 'GET', '/'), 404, 'no-route');
  });

  it('shadow mode forwards a stale write and counts it with enforced="false"', async () => {
    const id = uid('o');
    const labels = { route: 'order-shadow', reason: 'stale', enforced: 'false' };
    const before = await metricValue(fg.control, 'fencegate_fenced_writes_total', labels);
    const [a, b] = await twoTokens(fg.control, `order:${id}`);
    await forwardedWrite('PUT', `/orders/${id}`, b.token); // the enforced route moves the fence
    const shadow = await forwardedWrite('POST', `/orders/${id}`, a.token);
    expect(shadow.headers.get('content-type')).toMatch(/^application\/json/);
    const w = upstream.book.writes().find((x) => x.clientRequestId === forwarded.at(-1));
    expect(w).toMatchObject({ method: 'POST', fencingToken: a.token, lock: `order:${id}` });
    expect(await metricValue(fg.control, 'fencegate_fenced_writes_total', labels)).toBe(before + 1);
    // Shadow mode changed nothing in the store: the enforced route still refuses the stale token.
    expectProblem(await refusedWrite('PUT', `/orders/${id}`, a.token), 409, 'stale-token');
  });

  it('never let a refused write reach the upstream', () => {
    const applied = appliedIds(upstream.book.writes());
    expect(refused.length).toBeGreaterThan(10);
    for (const id of refused) expect(applied).not.toContain(id);
    for (const id of forwarded) expect(applied).toContain(id);
    expect(applied).toHaveLength(forwarded.length);
  });
});
