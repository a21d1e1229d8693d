/**
 * The s3 kind end to end: the real AWS SDK (Fencing-Token added before signing) →
 * gateway → SigV4 verifier → s3rver. Every request the verifier passed was forwarded
 * exactly as the client signed it (method, path, query, signed headers, body).
 */
import {
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  UploadPartCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { mint, startGateway, type TestGateway } from '../helpers/gateway-harness.js';
import { GATEWAY_STORES, type GatewayStoreFactory, type OpenedStore } from '../helpers/gateway-stores.js';
import type { Store } from '../../src/store/types.js';
import {
  fenced,
  invoicePolicy,
  s3Client,
  startS3rver,
  startSigV4Verifier,
  type S3rverHandle,
  type VerifierHandle,
} from '../helpers/s3.js';

let s3: S3rverHandle;
let verifier: VerifierHandle;
let opened: OpenedStore;
let store: Store;
let gw: TestGateway;
let client: S3Client;

beforeAll(async () => {
  s3 = await startS3rver(['invoices', 'archive']);
  verifier = await startSigV4Verifier(s3.url);
});

afterAll(async () => {
  await verifier?.close();
  await s3?.close();
});

// The lock store behind the gateway: the in-memory reference and a real Redis.
const STORES = GATEWAY_STORES.filter((f) => f.name === 'memory' || f.name === 'redis');
let factory: GatewayStoreFactory;

beforeEach(async () => {
  opened = await factory.open();
  store = opened.store;
  gw = await startGateway({ store, policy: invoicePolicy(verifier.url) });
  client = s3Client({ endpoint: gw.url });
  verifier.received.length = 0;
});

afterEach(async () => {
  client?.destroy();
  await gw?.close();
  await opened?.close();
});

const token = async (key: string) => (await mint(store, key)).token;

async function text(key: string, c: S3Client = client): Promise<string> {
  const got = await c.send(new GetObjectCommand({ Bucket: 'invoices', Key: key }));
  return (await got.Body?.transformToString()) ?? '';
}

async function status(p: Promise<unknown>): Promise<number> {
  return p.then(
    () => 200,
    (e: { $metadata?: { httpStatusCode?: number } }) => e.$metadata?.httpStatusCode ?? -1,
  );
}

function header(raw: readonly string[], name: string): string | undefined {
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]?.toLowerCase() === name) return raw[i + 1];
  return undefined;
}

describe.each(STORES)('kind: s3 through the gateway (lock store: $name)', (f) => {
  beforeAll(() => {
    factory = f;
  });

  it('PutObject (fenced) and GetObject pass with the signature intact, Host as sent', async () => {
    const t = await token('invoice:2024/a b+c.pdf');
    await client.send(
      fenced(new PutObjectCommand({ Bucket: 'invoices', Key: '2024/a b+c.pdf', Body: 'v1' }), t),
    );
    expect(await text('2024/a b+c.pdf')).toBe('v1');
    const put = verifier.received.find((r) => r.method === 'PUT');
    expect(put).toMatchObject({ verdict: 'verified' });
    expect(put?.url).toMatch(/^\/invoices\/2024\/a%20b%2Bc\.pdf\?x-id=PutObject$/);
    expect(header(put?.rawHeaders ?? [], 'host')).toBe(`127.0.0.1:${gw.port}`);
    expect(header(put?.rawHeaders ?? [], 'fencing-token')).toBe(t.toString());
    expect(verifier.received.every((r) => r.verdict === 'verified')).toBe(true);
  });

  it('a write without a token is refused (428) and never reaches the storage', async () => {
    expect(await status(client.send(new PutObjectCommand({ Bucket: 'invoices', Key: 'x', Body: 'x' })))).toBe(
      428,
    );
    expect(verifier.received).toHaveLength(0);
  });

  it('reads and listings pass without a token', async () => {
    const t = await token('invoice:r.txt');
    await client.send(fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'r.txt', Body: 'r' }), t));
    const head = await client.send(new HeadObjectCommand({ Bucket: 'invoices', Key: 'r.txt' }));
    expect(head.ContentLength).toBe(1);
    const list = await client.send(new ListObjectsV2Command({ Bucket: 'invoices', Prefix: 'r' }));
    expect(list.Contents?.map((o) => o.Key)).toContain('r.txt');
  });

  it('CopyObject is fenced by its destination', async () => {
    await client.send(
      fenced(
        new PutObjectCommand({ Bucket: 'invoices', Key: 'src.pdf', Body: 'source' }),
        await token('invoice:src.pdf'),
      ),
    );
    const copy = () =>
      new CopyObjectCommand({ Bucket: 'invoices', Key: 'dst.pdf', CopySource: 'invoices/src.pdf' });
    // the source's token does not open the destination
    const srcToken = await token('invoice:src.pdf');
    expect(await status(client.send(fenced(copy(), srcToken)))).toBe(403);
    await client.send(fenced(copy(), await token('invoice:dst.pdf')));
    expect(await text('dst.pdf')).toBe('source');
  });

  it('DeleteObject is fenced', async () => {
    await client.send(
      fenced(
        new PutObjectCommand({ Bucket: 'invoices', Key: 'gone.txt', Body: 'g' }),
        await token('invoice:gone.txt'),
      ),
    );
    expect(await status(client.send(new DeleteObjectCommand({ Bucket: 'invoices', Key: 'gone.txt' })))).toBe(
      428,
    );
    await client.send(
      fenced(
        new DeleteObjectCommand({ Bucket: 'invoices', Key: 'gone.txt' }),
        await token('invoice:gone.txt'),
      ),
    );
    expect(await status(text('gone.txt'))).toBe(404);
  });

  it('DeleteObjects is checked key by key, all or nothing, and forwarded as signed', async () => {
    const put = async (key: string) => {
      const t = await token(`invoice:${key}`);
      await client.send(fenced(new PutObjectCommand({ Bucket: 'invoices', Key: key, Body: key }), t));
      return t;
    };
    const tA = await put('del-a.txt');
    await token('invoice:del-b.txt'); // (the memory store counts tokens per key from 1: keep b's apart)
    await put('del-b.txt');
    const deleteObjects = (keys: string[], t: bigint) =>
      client.send(
        fenced(
          new DeleteObjectsCommand({ Bucket: 'invoices', Delete: { Objects: keys.map((Key) => ({ Key })) } }),
          t,
        ),
      );
    verifier.received.length = 0;
    // One token cannot open two objects' locks: refused as a whole, nothing deleted (on a
    // real store a token of another lock was never issued for it: 403; the memory store
    // counts every key's tokens from 1, so there it is stale for b's lock: 409).
    expect([403, 409]).toContain(await status(deleteObjects(['del-a.txt', 'del-b.txt'], tA)));
    expect(verifier.received).toHaveLength(0);
    expect(await text('del-a.txt')).toBe('del-a.txt');
    // A newer owner took del-a.txt: the old token is stale for it.
    const newer = await put('del-a.txt');
    expect(await status(deleteObjects(['del-a.txt'], tA))).toBe(409);
    expect(verifier.received.filter((r) => r.method === 'POST')).toHaveLength(0);
    expect(await text('del-a.txt')).toBe('del-a.txt');
    // The current owner's DeleteObjects passes, with the body and signature intact.
    await deleteObjects(['del-a.txt'], newer);
    const post = verifier.received.find((r) => r.method === 'POST');
    expect(post).toMatchObject({ verdict: 'verified' });
    expect(post?.url).toMatch(/^\/invoices\/?\?delete/);
    expect(await status(text('del-a.txt'))).toBe(404);
    expect(await text('del-b.txt')).toBe('del-b.txt');
  });

  it('a bucket-level write (empty key) is refused with 400', async () => {
    expect(await status(client.send(fenced(new CreateBucketCommand({ Bucket: 'invoices' }), 1)))).toBe(400);
    expect(verifier.received).toHaveLength(0);
  });

  it('a multipart upload: create, parts and complete are fenced and assemble the object', async () => {
    const t = await token('invoice:big.bin');
    const created = await client.send(
      fenced(new CreateMultipartUploadCommand({ Bucket: 'invoices', Key: 'big.bin' }), t),
    );
    const UploadId = created.UploadId;
    const part1 = Buffer.alloc(5 * 1024 * 1024, 'a');
    const p1 = await client.send(
      fenced(
        new UploadPartCommand({ Bucket: 'invoices', Key: 'big.bin', UploadId, PartNumber: 1, Body: part1 }),
        t,
      ),
    );
    const p2 = await client.send(
      fenced(
        new UploadPartCommand({ Bucket: 'invoices', Key: 'big.bin', UploadId, PartNumber: 2, Body: 'tail' }),
        t,
      ),
    );
    await client.send(
      fenced(
        new CompleteMultipartUploadCommand({
          Bucket: 'invoices',
          Key: 'big.bin',
          UploadId,
          MultipartUpload: {
            Parts: [
              { PartNumber: 1, ETag: p1.ETag },
              { PartNumber: 2, ETag: p2.ETag },
            ],
          },
        }),
        t,
      ),
    );
    const body = await text('big.bin');
    expect(body.length).toBe(part1.length + 4);
    expect(body.endsWith('atail')).toBe(true);
    expect(verifier.received.every((r) => r.verdict === 'verified')).toBe(true);
  });

  it("a stale owner's PutObject is refused; the object keeps the newer owner's bytes", async () => {
    const old = await token('invoice:race.txt');
    const fresh = await token('invoice:race.txt');
    await client.send(
      fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'race.txt', Body: 'new owner' }), fresh),
    );
    expect(
      await status(
        client.send(
          fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'race.txt', Body: 'old owner' }), old),
        ),
      ),
    ).toBe(409);
    expect(await text('race.txt')).toBe('new owner');
  });

  it('a CompleteMultipartUpload whose token went stale is refused and stays unassembled', async () => {
    const old = await token('invoice:mp.txt');
    const created = await client.send(
      fenced(new CreateMultipartUploadCommand({ Bucket: 'invoices', Key: 'mp.txt' }), old),
    );
    const UploadId = created.UploadId;
    const part = await client.send(
      fenced(
        new UploadPartCommand({
          Bucket: 'invoices',
          Key: 'mp.txt',
          UploadId,
          PartNumber: 1,
          Body: 'old owner',
        }),
        old,
      ),
    );
    const fresh = await token('invoice:mp.txt');
    await client.send(
      fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'mp.txt', Body: 'new owner' }), fresh),
    );
    verifier.received.length = 0;
    const complete = new CompleteMultipartUploadCommand({
      Bucket: 'invoices',
      Key: 'mp.txt',
      UploadId,
      MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag }] },
    });
    expect(await status(client.send(fenced(complete, old)))).toBe(409);
    expect(verifier.received).toHaveLength(0); // never reached the storage: not assembled
    expect(await text('mp.txt')).toBe('new owner');
  });

  it('a wrong secret is refused by the storage side (the verifier), through the gateway', async () => {
    const wrong = s3Client({ endpoint: gw.url, secretAccessKey: 'wrong' });
    const t = await token('invoice:w.txt');
    expect(
      await status(
        wrong.send(fenced(new PutObjectCommand({ Bucket: 'invoices', Key: 'w.txt', Body: 'w' }), t)),
      ),
    ).toBe(403);
    wrong.destroy();
    expect(verifier.received.at(-1)).toMatchObject({ verdict: 'refused', reason: 'signature mismatch' });
    expect(await status(text('w.txt'))).toBe(404);
  });
});
