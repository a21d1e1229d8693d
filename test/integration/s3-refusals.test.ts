/**
 * Refusals on s3 routes, read by the real AWS SDK v3 through the gateway (in front of
 * s3rver): each is an S3 `<Error>` document, so the SDK raises an error named by its
 * `<Code>` (StaleFencingToken, FencingTokenRequired, …) that carries the refusal's fields,
 * the status, the request id and, for 503, Retry-After.
 */
import {
  CreateBucketCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { mint, startGateway, startUpstream, type TestGateway } from '../helpers/gateway-harness.js';
import { faultyStore, type FaultyStore } from '../helpers/faulty-store.js';
import { MemoryStore } from '../helpers/memory-store.js';
import {
  fenced,
  invoicePolicy,
  s3Client,
  s3Refusal as refusal,
  startS3rver,
  type S3rverHandle,
} from '../helpers/s3.js';

let s3: S3rverHandle;
let store: FaultyStore;
let gw: TestGateway;
let client: S3Client;

beforeAll(async () => {
  s3 = await startS3rver(['invoices']);
});

afterAll(async () => {
  await s3?.close();
});

beforeEach(async () => {
  store = faultyStore(new MemoryStore());
  gw = await startGateway({ store, policy: invoicePolicy(s3.url) });
  client = s3Client({ endpoint: gw.url });
});

afterEach(async () => {
  client?.destroy();
  await gw?.close();
});

const put = (key: string, body = 'x') => new PutObjectCommand({ Bucket: 'invoices', Key: key, Body: body });

async function text(key: string): Promise<string> {
  const got = await client.send(new GetObjectCommand({ Bucket: 'invoices', Key: key }));
  return (await got.Body?.transformToString()) ?? '';
}

describe('kind: s3 refusals through the AWS SDK v3', () => {
  it("a stale owner's PutObject raises StaleFencingToken with the lock, its token and the highest", async () => {
    const old = (await mint(store, 'invoice:race.txt')).token;
    const fresh = (await mint(store, 'invoice:race.txt')).token;
    await client.send(fenced(put('race.txt', 'new owner'), fresh));
    const err = await refusal(client.send(fenced(put('race.txt', 'old owner'), old)));
    expect(err.name).toBe('StaleFencingToken');
    expect(err.Code).toBe('StaleFencingToken');
    expect(err.$metadata.httpStatusCode).toBe(409);
    expect(err.$fault).toBe('client');
    expect(err.Type).toBe('urn:fencegate:stale-token');
    expect(err.Lock).toBe('invoice:race.txt');
    expect(err.Token).toBe(old.toString());
    expect(err.Highest).toBe(fresh.toString());
    expect(err.message).toMatch(/older|below|stale/i);
    expect(err.$metadata.requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(err.RequestId).toBe(err.$metadata.requestId);
    expect(await text('race.txt')).toBe('new owner');
  });

  it('the same stale write again (refused from the stale-write cache) is the same named error', async () => {
    const old = (await mint(store, 'invoice:again.txt')).token;
    const fresh = (await mint(store, 'invoice:again.txt')).token;
    await client.send(fenced(put('again.txt'), fresh));
    for (let i = 0; i < 3; i++) {
      const err = await refusal(client.send(fenced(put('again.txt'), old)));
      expect([err.name, err.Highest]).toEqual(['StaleFencingToken', fresh.toString()]);
    }
  });

  it('no token, a malformed token, a token never issued: FencingTokenRequired, MalformedFencingToken, InvalidFencingToken', async () => {
    const none = await refusal(client.send(put('a.txt')));
    expect([none.name, none.$metadata.httpStatusCode, none.Lock]).toEqual([
      'FencingTokenRequired',
      428,
      'invoice:a.txt',
    ]);
    const malformed = await refusal(client.send(fenced(put('a.txt'), '007')));
    expect([malformed.name, malformed.$metadata.httpStatusCode]).toEqual(['MalformedFencingToken', 400]);
    await mint(store, 'invoice:a.txt');
    const forged = await refusal(client.send(fenced(put('a.txt'), 1000)));
    expect([forged.name, forged.$metadata.httpStatusCode, forged.Token]).toEqual([
      'InvalidFencingToken',
      403,
      '1000',
    ]);
  });

  it('a bucket-level write and a DeleteObjects over two locks are named too', async () => {
    const bucket = await refusal(client.send(fenced(new CreateBucketCommand({ Bucket: 'invoices' }), 1)));
    expect([bucket.name, bucket.$metadata.httpStatusCode]).toEqual(['BucketWriteNotFenced', 400]);
    const t = (await mint(store, 'invoice:d1')).token;
    const many = await refusal(
      client.send(
        fenced(
          new DeleteObjectsCommand({
            Bucket: 'invoices',
            Delete: { Objects: [{ Key: 'd1' }, { Key: 'd2' }] },
          }),
          t,
        ),
      ),
    );
    // d2's lock never issued a token (403) in a real store; the memory store counts every key from 1.
    expect(['InvalidFencingToken', 'StaleFencingToken']).toContain(many.name);
  });

  it('the fence store unreachable: FenceUnavailable, 503, with Retry-After, a server fault', async () => {
    const t = (await mint(store, 'invoice:down.txt')).token;
    store.failing.add('admit');
    let retryAfter: string | undefined;
    const command = fenced(put('down.txt'), t);
    command.middlewareStack.add(
      (next) => async (args) => {
        const out = await next(args);
        retryAfter = (out.response as { headers: Record<string, string> }).headers['retry-after'];
        return out;
      },
      { step: 'deserialize', name: 'readRetryAfter', priority: 'low' },
    );
    const err = await refusal(client.send(command)).finally(() => store.failing.delete('admit'));
    expect([err.name, err.$metadata.httpStatusCode, err.$fault]).toEqual(['FenceUnavailable', 503, 'server']);
    expect(retryAfter).toBe('1');
  });

  it('before a route is known, in a policy of s3 upstreams only: NoRoute, BadRequest', async () => {
    const unrouted = await refusal(
      client.send(new PutObjectCommand({ Bucket: 'elsewhere', Key: 'k', Body: 'x' })),
    );
    expect([unrouted.name, unrouted.$metadata.httpStatusCode]).toEqual(['NoRoute', 404]);
    expect(unrouted.message).toBe('no route for PUT /elsewhere/k');
    const dotted = await refusal(client.send(fenced(put('a/../b.txt'), 1)));
    expect([dotted.name, dotted.$metadata.httpStatusCode]).toEqual(['BadRequest', 400]);
  });

  it('the storage unreachable: UpstreamUnavailable (502)', async () => {
    const closed = await startUpstream();
    const url = closed.url;
    await closed.close();
    await gw.setPolicy(invoicePolicy(url));
    const err = await refusal(client.send(new GetObjectCommand({ Bucket: 'invoices', Key: 'x' })));
    expect([err.name, err.$metadata.httpStatusCode]).toEqual(['UpstreamUnavailable', 502]);
  });
});
