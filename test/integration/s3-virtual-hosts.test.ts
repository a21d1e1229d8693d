/**
 * Virtual-hosted-style requests (`Host: bucket.domain`) through the gateway to s3rver,
 * which serves virtual-hosted buckets at `<bucket>.s3.test` as a storage with its domain
 * set does. Without a declaration the gateway refuses a Host that may name a bucket
 * (`PUT /other2/k` with `Host: invoices.s3.test` was fenced under other2's lock and
 * written to invoices/other2/k); with `virtualHostDomains: [s3.test]` it reads the
 * bucket from the Host for routing and locks. The real AWS SDK v3 in its default
 * (virtual-hosted) style, every name resolved to the loopback address.
 */
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { Agent, request as httpRequest } from 'node:http';
import type { LookupAddress } from 'node:dns';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  mint,
  startGateway,
  startUpstream,
  type TestGateway,
  type TestUpstream,
} from '../helpers/gateway-harness.js';
import { MemoryStore } from '../helpers/memory-store.js';
import {
  CREDENTIALS,
  REGION,
  fenced,
  invoicePolicy,
  s3Client,
  s3Refusal,
  startS3rver,
  type S3rverHandle,
} from '../helpers/s3.js';

let s3: S3rverHandle;
let orders: TestUpstream;
let store: MemoryStore;
let gw: TestGateway;
const clients: S3Client[] = [];

function policy(domains: string | null): string {
  return invoicePolicy(s3.url, {
    upstream: domains === null ? '' : `    virtualHostDomains: ${domains}\n`,
    upstreams: `  orders:\n    kind: http\n    url: ${orders.url}\n`,
    routes: `  - name: other-objects
    methods: [GET, HEAD, PUT, POST, DELETE]
    path: /other2/*key
    upstream: objects
    lock: 'other:{key}'
  - name: order-writes
    methods: [PUT]
    path: /orders/*rest
    upstream: orders
    lock: 'order:{rest}'
`,
  });
}

/** Every host name is the loopback address (so `invoices.s3.test` reaches the gateway). */
function loopback(
  _host: string,
  options: { all?: boolean },
  callback: (err: Error | null, address: string | LookupAddress[], family?: number) => void,
): void {
  if (options.all === true) callback(null, [{ address: '127.0.0.1', family: 4 }]);
  else callback(null, '127.0.0.1', 4);
}

/** The real SDK in virtual-hosted style with the gateway at `s3.test:<port>`. */
function virtualHosted(): S3Client {
  const client = new S3Client({
    endpoint: `http://s3.test:${gw.port}`,
    region: REGION,
    forcePathStyle: false,
    credentials: CREDENTIALS,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 1,
    requestHandler: { httpAgent: new Agent({ lookup: loopback as never }) },
  });
  clients.push(client);
  return client;
}

/** Path style straight to s3rver: what the storage holds. */
async function stored(bucket: string, key: string): Promise<string | null> {
  const direct = s3Client({ endpoint: s3.url });
  clients.push(direct);
  try {
    const got = await direct.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return (await got.Body?.transformToString()) ?? '';
  } catch (err) {
    if (err instanceof S3ServiceException && err.name === 'NoSuchKey') return null;
    throw err;
  }
}

/** One raw request to the gateway with the Host given. */
function raw(method: string, path: string, host: string, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; type: string; body: string }>((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port: gw.port,
        method,
        path,
        headers: { host, 'content-length': '1', ...headers },
      },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString('utf8')));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type']), body }),
        );
      },
    );
    req.on('error', reject);
    req.end('x');
  });
}

beforeAll(async () => {
  s3 = await startS3rver(['invoices', 'other2'], { serviceEndpoint: 'test' });
  orders = await startUpstream();
});

afterAll(async () => {
  await orders?.close();
  await s3?.close();
});

beforeEach(() => {
  store = new MemoryStore();
});

afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  await gw?.close();
});

describe('virtual-hosted-style requests, the upstream declaring no domain', () => {
  beforeEach(async () => {
    gw = await startGateway({ store, policy: policy(null) });
  });

  it('are refused (VirtualHostRefused), not fenced under the lock their path names', async () => {
    const t = (await mint(store, 'other:k')).token;
    const put = new PutObjectCommand({ Bucket: 'invoices', Key: 'other2/k', Body: 'under the wrong lock' });
    const err = await s3Refusal(virtualHosted().send(fenced(put, t)));
    expect([err.name, err.$metadata.httpStatusCode]).toEqual(['VirtualHostRefused', 400]);
    expect(err.Host).toBe(`invoices.s3.test:${gw.port}`);
    expect(err.message).toMatch(/virtualHostDomains/);
    expect(await stored('invoices', 'other2/k')).toBeNull();
  });

  it('the case as found: PUT /other2/k with Host: invoices.localhost', async () => {
    const t = (await mint(store, 'other:k')).token;
    const res = await raw('PUT', '/other2/k', 'invoices.localhost', { 'fencing-token': String(t) });
    expect(res.status).toBe(400);
    expect(res.type).toBe('application/xml');
    expect(res.body).toMatch(
      /<Code>VirtualHostRefused<\/Code>.*<Type>urn:fencegate:virtual-host-refused<\/Type>/s,
    );
    expect(res.body).toContain('<Host>invoices.localhost</Host>');
  });

  it('path style keeps working at an IP address and at a name without a dot', async () => {
    const t = (await mint(store, 'invoice:p.txt')).token;
    await s3Client({ endpoint: gw.url }).send(
      fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'p.txt', Body: 'path style' }), t),
    );
    expect(await stored('invoices', 'p.txt')).toBe('path style');
    const byName = await raw('PUT', '/invoices/q.txt', `localhost:${gw.port}`);
    expect(byName.body).toContain('<Code>FencingTokenRequired</Code>');
  });
});

describe('virtual-hosted-style requests, the upstream declaring virtualHostDomains: [s3.test]', () => {
  beforeEach(async () => {
    gw = await startGateway({ store, policy: policy('[s3.test]') });
  });

  it('take the bucket from the Host: routed and locked as /invoices/other2/k, written there', async () => {
    const t = (await mint(store, 'invoice:other2/k')).token;
    const client = virtualHosted();
    await client.send(
      fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'other2/k', Body: 'right lock' }), t),
    );
    expect(await stored('invoices', 'other2/k')).toBe('right lock');
    const read = await client.send(new GetObjectCommand({ Bucket: 'invoices', Key: 'other2/k' }));
    expect(await read.Body?.transformToString()).toBe('right lock');
    // other2's token does not open invoices/other2/k
    const wrong = (await mint(store, 'other:k')).token;
    const err = await s3Refusal(
      client.send(
        fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'other2/k', Body: 'x' }), wrong + 5n),
      ),
    );
    expect([err.name, err.Lock]).toEqual(['InvalidFencingToken', 'invoice:other2/k']);
    // and a stale owner of the object is refused under the object's lock
    await mint(store, 'invoice:other2/k');
    const newest = (await mint(store, 'invoice:other2/k')).token;
    await client.send(
      fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'other2/k', Body: 'newest' }), newest),
    );
    const stale = await s3Refusal(
      client.send(fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'other2/k', Body: 'old' }), t)),
    );
    expect([stale.name, stale.Lock, stale.Highest]).toEqual([
      'StaleFencingToken',
      'invoice:other2/k',
      String(newest),
    ]);
    expect(await stored('invoices', 'other2/k')).toBe('newest');
  });

  it('DeleteObjects addressed to the bucket by its Host is checked key by key under that bucket', async () => {
    const client = virtualHosted();
    const t = (await mint(store, 'invoice:gone.txt')).token;
    await client.send(fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'gone.txt', Body: 'g' }), t));
    await client.send(
      fenced(new DeleteObjectsCommand({ Bucket: 'invoices', Delete: { Objects: [{ Key: 'gone.txt' }] } }), t),
    );
    expect(await stored('invoices', 'gone.txt')).toBeNull();
  });

  it('the declared domain itself is path style', async () => {
    const t = (await mint(store, 'invoice:at-domain.txt')).token;
    const client = new S3Client({
      endpoint: `http://s3.test:${gw.port}`,
      region: REGION,
      forcePathStyle: true,
      credentials: CREDENTIALS,
      maxAttempts: 1,
      requestHandler: { httpAgent: new Agent({ lookup: loopback as never }) },
    });
    clients.push(client);
    await client.send(
      fenced(
        new PutObjectCommand({ Bucket: 'invoices', Key: 'at-domain.txt', Body: 'domain, path style' }),
        t,
      ),
    );
    expect(await stored('invoices', 'at-domain.txt')).toBe('domain, path style');
  });

  it('a Host under no declared domain, in upper case, or naming a bucket routed to another upstream is refused', async () => {
    for (const host of ['invoices.localhost', 'INVOICES.s3.test', 'orders.s3.test']) {
      // (the first two read as path style would match no route: their path names a bucket)
      const path = host === 'orders.s3.test' ? '/1' : '/invoices/k';
      const res = await raw('PUT', path, host, { 'fencing-token': '1' });
      expect([host, res.status, res.type]).toEqual([host, 400, 'application/xml']);
      expect(res.body).toContain('<Code>VirtualHostRefused</Code>');
    }
    expect(orders.hits).toHaveLength(0);
    // A path-style request matching no route, in this policy of s3 and http upstreams: problem+json.
    const unrouted = await raw('PUT', '/elsewhere/k', `127.0.0.1:${gw.port}`);
    expect([unrouted.status, unrouted.type]).toEqual([404, 'application/problem+json']);
    // Under the domain but matching no route: S3's format (the Host names an s3 upstream).
    const none = await raw('PUT', '/k', 'nothing.s3.test');
    expect([none.status, none.type]).toEqual([404, 'application/xml']);
    expect(none.body).toContain('<Code>NoRoute</Code>');
  });
});
