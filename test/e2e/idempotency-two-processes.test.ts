/**
 * Idempotency keys across two `fencegate serve` processes sharing one store (the shared
 * Postgres in a schema of its own; an embedded store directory): the client's connection
 * to process 1 is cut after the upstream got the write and before it answers; the retry
 * through process 2 gets the kept answer replayed, and the upstream saw the write once.
 */
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SHARED_POSTGRES, acquire, dropPostgresSchema, randomNamespace } from '../helpers/e2e.js';
import { startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { waitUntil } from '../helpers/wait.js';

interface Backend {
  name: string;
  setup(dir: string): { args: string[]; cleanup: () => Promise<void> };
}

const backends: Backend[] = [
  {
    name: 'postgres',
    setup() {
      const schema = randomNamespace();
      return {
        args: ['--store', SHARED_POSTGRES, '--store-namespace', schema],
        cleanup: () => dropPostgresSchema(schema),
      };
    },
  },
  {
    name: 'embedded',
    setup(dir) {
      return { args: ['--store', join(dir, 'store')], cleanup: async () => undefined };
    },
  },
];

describe.each(backends)('idempotency keys across two gateway processes on one $name store', (backend) => {
  let dir: string;
  let upstream: Server;
  const writes: string[] = [];
  let release: (() => void) | null = null;
  let gw1: FencegateProcess;
  let gw2: FencegateProcess;
  let cleanup: () => Promise<void> = async () => undefined;

  beforeAll(async () => {
    dir = await tempDir('fg-e2e-idem-');
    // Answers each write once the test lets it: the client is cut before that.
    upstream = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        writes.push(req.url ?? '');
        const answer = () =>
          res
            .writeHead(201, { 'content-type': 'application/json' })
            .end(JSON.stringify({ write: writes.length }));
        if (release === null) answer();
        else release = answer;
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    await writeFile(
      join(dir, 'policy.yaml'),
      `version: 1
upstreams:
  ledger:
    kind: http
    url: ${url}
routes:
  - name: payments
    methods: [POST]
    path: /payments/:id
    upstream: ledger
    lock: 'payment:{id}'
    idempotency: { ttlMs: 600000 }
`,
    );
    const setup = backend.setup(dir);
    cleanup = setup.cleanup;
    const args = ['--policies', join(dir, 'policy.yaml'), ...setup.args];
    gw1 = await startFencegate(args);
    gw2 = await startFencegate(args);
  }, 300_000);

  afterAll(async () => {
    await gw1?.stop();
    await gw2?.stop();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
    await cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  it('a retry after a dropped response is replayed by the other process; the upstream saw the write once', async () => {
    const grant = await acquire(gw1.control, 'payment:7', 'payer');
    const body = '{"amount":12}';
    const head =
      `POST /payments/7 HTTP/1.1\r\nhost: 127.0.0.1\r\nfencing-token: ${grant.token}\r\n` +
      `idempotency-key: "pay-7"\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
    release = () => undefined; // hold the upstream's answer
    const port = Number(new URL(gw1.data).port);
    const socket = connect(port, '127.0.0.1');
    socket.on('data', () => undefined);
    socket.on('error', () => undefined);
    socket.write(head);
    await waitUntil('the upstream to get the write', () => writes.length === 1, { timeoutMs: 30_000 });
    socket.destroy();
    const answer = release;
    release = null;
    answer();

    const retry = () =>
      fetch(`${gw2.data}/payments/7`, {
        method: 'POST',
        headers: { 'fencing-token': grant.token, 'idempotency-key': '"pay-7"' },
        body,
      });
    let res = await retry();
    await waitUntil(
      'the answer to be kept',
      async () => {
        if (res.status !== 409) return true;
        res = await retry();
        return false;
      },
      { timeoutMs: 30_000, everyMs: 50 },
    );
    expect(res.status).toBe(201);
    expect(res.headers.get('idempotent-replayed')).toBe('true');
    expect(await res.json()).toEqual({ write: 1 });
    const mismatch = await fetch(`${gw1.data}/payments/7`, {
      method: 'POST',
      headers: { 'fencing-token': grant.token, 'idempotency-key': '"pay-7"' },
      body: '{"amount":13}',
    });
    expect(mismatch.status).toBe(422);
    expect(writes).toEqual(['/payments/7']);
  });
});
