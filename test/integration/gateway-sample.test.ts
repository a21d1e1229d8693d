import { readFile } from 'node:fs/promises';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSampleUpstream, type AppliedWrite, type SampleUpstream } from '../../src/sample/index.js';
import { mint, startGateway, type TestGateway } from '../helpers/gateway-harness.js';
import { MemoryStore } from '../helpers/memory-store.js';
import { sleep } from '../helpers/wait.js';

async function json(url: string, init: Parameters<typeof request>[1] = {}) {
  const res = await request(url, init);
  const text = await res.body.text();
  return { status: res.statusCode, body: text.length > 0 ? (JSON.parse(text) as unknown) : null };
}

describe('sample upstream behind the gateway with policies/orders.yaml', () => {
  let sample: SampleUpstream;
  let gw: TestGateway;
  const store = new MemoryStore();

  beforeAll(async () => {
    sample = await startSampleUpstream({ host: '127.0.0.1', port: 0 });
    const policy = (await readFile('policies/orders.yaml', 'utf8')).replace(
      'http://${FENCEGATE_SAMPLE:-127.0.0.1:9000}',
      sample.url,
    );
    expect(policy).toContain(`url: ${sample.url}`);
    gw = await startGateway({ store, policy });
  });

  afterAll(async () => {
    await gw.close();
    await sample.close();
  });

  it('serves orders directly: CRUD and 404s', async () => {
    expect((await json(`${sample.url}/orders/a`)).status).toBe(404);
    expect(await json(`${sample.url}/orders/a`, { method: 'PUT', body: '{"qty":1}' })).toEqual({
      status: 201,
      body: { id: 'a', body: { qty: 1 }, version: 1 },
    });
    expect((await json(`${sample.url}/orders/a`, { method: 'PATCH', body: '{"note":"x"}' })).body).toEqual({
      id: 'a',
      body: { qty: 1, note: 'x' },
      version: 2,
    });
    expect((await json(`${sample.url}/orders`)).body).toHaveLength(1);
    expect((await json(`${sample.url}/orders/a`, { method: 'DELETE' })).status).toBe(204);
    expect((await json(`${sample.url}/orders/a`, { method: 'DELETE' })).status).toBe(404);
    expect((await json(`${sample.url}/elsewhere`)).status).toBe(404);
  });

  it('records every applied write with the token the gateway forwarded; stale writes never arrive', async () => {
    const since = sample.book.writes().length;
    const a = await mint(store, 'order:42');
    const b = await mint(store, 'order:42');
    const put = (token: bigint, qty: number) =>
      json(`${gw.url}/orders/42`, {
        method: 'PUT',
        headers: { 'fencing-token': String(token) },
        body: JSON.stringify({ qty }),
      });
    expect((await put(b.token, 2)).status).toBe(201);
    expect((await put(a.token, 1)).status).toBe(409);
    expect((await json(`${gw.url}/orders/42`)).body).toMatchObject({ body: { qty: 2 } });
    const { body } = await json(`${gw.url}/_writes?since=${since}`);
    const writes = body as AppliedWrite[];
    expect(writes).toHaveLength(1);
    expect(writes[0]).toMatchObject({ method: 'PUT', id: '42', fencingToken: String(b.token), bytes: 9 });
    expect(writes[0]?.requestId).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('?delayMs makes a write slow: the next, higher token waits for it at the drain barrier', async () => {
    const a = await mint(store, 'order:slow');
    const b = await mint(store, 'order:slow');
    const first = json(`${gw.url}/orders/slow?delayMs=300`, {
      method: 'PUT',
      headers: { 'fencing-token': String(a.token) },
      body: '"a"',
    });
    await sleep(50);
    const second = json(`${gw.url}/orders/slow`, {
      method: 'PUT',
      headers: { 'fencing-token': String(b.token) },
      body: '"b"',
    });
    expect((await first).status).toBe(201);
    expect((await second).status).toBe(200);
    const tokens = sample.book
      .writes()
      .filter((w) => w.id === 'slow')
      .map((w) => w.fencingToken);
    expect(tokens).toEqual([String(a.token), String(b.token)]);
  });
});
