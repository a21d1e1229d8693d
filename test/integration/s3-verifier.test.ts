/**
 * The S3 test infrastructure can fail: the SigV4 verifier in front of s3rver refuses a
 * request signed with a wrong secret, or altered after signing, and passes what the SDK
 * signed (PutObject / GetObject through verifier → s3rver), Fencing-Token included.
 */
import { GetObjectCommand, PutObjectCommand, S3ServiceException } from '@aws-sdk/client-s3';
import { Sha256 } from '@aws-crypto/sha256-js';
import { SignatureV4 } from '@smithy/signature-v4';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CREDENTIALS,
  REGION,
  fenced,
  s3Client,
  startS3rver,
  startSigV4Verifier,
  type S3rverHandle,
  type VerifierHandle,
} from '../helpers/s3.js';

let s3: S3rverHandle;
let verifier: VerifierHandle;

beforeAll(async () => {
  s3 = await startS3rver(['invoices']);
  verifier = await startSigV4Verifier(s3.url);
});

afterAll(async () => {
  await verifier?.close();
  await s3?.close();
});

function header(raw: readonly string[], name: string): string | undefined {
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]?.toLowerCase() === name) return raw[i + 1];
  return undefined;
}

/** A PutObject signed by hand with `secret`, sent with fetch after `tamper`. */
async function handSigned(
  secret: string,
  tamper: (h: Record<string, string>) => void = () => undefined,
): Promise<number> {
  const url = new URL(`${verifier.url}/invoices/hand.txt`);
  const body = 'by hand';
  const signer = new SignatureV4({
    credentials: { accessKeyId: CREDENTIALS.accessKeyId, secretAccessKey: secret },
    region: REGION,
    service: 's3',
    sha256: Sha256,
    uriEscapePath: false,
  });
  const hash = new Sha256();
  hash.update(body);
  const hex = Buffer.from(await hash.digest()).toString('hex');
  const signed = await signer.sign({
    method: 'PUT',
    protocol: 'http:',
    hostname: url.hostname,
    port: Number(url.port),
    path: url.pathname,
    query: {},
    headers: { host: url.host, 'x-amz-content-sha256': hex, 'fencing-token': '7' },
    body,
  });
  const headers = { ...(signed.headers as Record<string, string>) };
  delete headers.host;
  tamper(headers);
  const res = await fetch(url, { method: 'PUT', headers, body });
  await res.arrayBuffer();
  return res.status;
}

describe('SigV4 verifier in front of s3rver', () => {
  it('passes what the SDK signed: PutObject then GetObject, Fencing-Token signed', async () => {
    const client = s3Client({ endpoint: verifier.url });
    await client.send(
      fenced(new PutObjectCommand({ Bucket: 'invoices', Key: '2024/a b.pdf', Body: 'hello' }), 42n),
    );
    const got = await client.send(new GetObjectCommand({ Bucket: 'invoices', Key: '2024/a b.pdf' }));
    expect(await got.Body?.transformToString()).toBe('hello');
    const put = verifier.received.find((r) => r.method === 'PUT');
    expect(put?.verdict).toBe('verified');
    expect(put?.url).toMatch(/^\/invoices\/2024\/a%20b\.pdf/);
    expect(header(put?.rawHeaders ?? [], 'fencing-token')).toBe('42');
    expect(header(put?.rawHeaders ?? [], 'authorization')).toMatch(/SignedHeaders=[^,]*fencing-token/);
    client.destroy();
  });

  it('refuses a request signed with a wrong secret (SDK), and it never reaches s3rver', async () => {
    const client = s3Client({ endpoint: verifier.url, secretAccessKey: 'not-the-secret' });
    const err = await client
      .send(new PutObjectCommand({ Bucket: 'invoices', Key: 'wrong.txt', Body: 'x' }))
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(S3ServiceException);
    expect((err as S3ServiceException).$metadata.httpStatusCode).toBe(403);
    client.destroy();
    const good = s3Client({ endpoint: verifier.url });
    await expect(
      good.send(new GetObjectCommand({ Bucket: 'invoices', Key: 'wrong.txt' })),
    ).rejects.toMatchObject({
      $metadata: { httpStatusCode: 404 },
    });
    good.destroy();
  });

  it('hand-signed: the right secret passes; a wrong secret, or a signed header changed after signing, gets 403', async () => {
    expect(await handSigned(CREDENTIALS.secretAccessKey)).toBe(200);
    expect(await handSigned('wrong')).toBe(403);
    expect(
      await handSigned(CREDENTIALS.secretAccessKey, (h) => {
        h['fencing-token'] = '8';
      }),
    ).toBe(403);
    expect(
      await handSigned(CREDENTIALS.secretAccessKey, (h) => {
        delete h['fencing-token'];
      }),
    ).toBe(403);
    const refused = verifier.received.filter((r) => r.verdict === 'refused').map((r) => r.reason);
    expect(refused).toContain('signature mismatch');
    expect(refused).toContain('signed header fencing-token is missing');
  });

  it('refuses a body that does not match its signed sha256', async () => {
    const status = await handSigned(CREDENTIALS.secretAccessKey, (h) => {
      h['x-amz-content-sha256'] = '0'.repeat(64);
    });
    expect(status).toBe(403);
  });
});
