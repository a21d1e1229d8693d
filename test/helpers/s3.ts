/**
 * S3 test infrastructure:
 *
 * - startS3rver(): a real S3-compatible server (s3rver) on a free loopback port, in a temp
 *   directory, with buckets made up front (names of 3+ characters). s3rver does not check
 *   SigV4 signatures: it accepts any secret.
 * - startSigV4Verifier(): so an HTTP proxy in front of it recomputes every request's SigV4
 *   signature with @smithy/signature-v4 from the request exactly as it arrived (method,
 *   raw path, query, the signed headers' values, the body's sha256) and answers 403 to a
 *   mismatch, forwarding only verified requests. A request that passes it is what the
 *   client signed; it also records what it received, for byte-for-byte assertions.
 * - s3Client() / fenced(): the real AWS SDK v3 client, path style, static credentials, and
 *   a per-command middleware that adds `Fencing-Token` in the build step, before signing,
 *   so the token is a signed header.
 */
import { Sha256 } from '@aws-crypto/sha256-js';
import { S3Client, S3ServiceException } from '@aws-sdk/client-s3';
import { SignatureV4 } from '@smithy/signature-v4';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import S3rver from 's3rver';

export const REGION = 'us-east-1';
// s3rver knows only the access key id S3RVER (it checks no V4 signature, so any secret passes it).
export const CREDENTIALS = {
  accessKeyId: 'S3RVER',
  secretAccessKey: 'fencegate-test-secret',
} as const;

export interface S3rverHandle {
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * `serviceEndpoint`: s3rver serves virtual-hosted buckets at `<bucket>.s3.<serviceEndpoint>`
 * (and path style at any other Host); default amazonaws.com.
 */
export async function startS3rver(
  buckets: readonly string[],
  opts: { serviceEndpoint?: string } = {},
): Promise<S3rverHandle> {
  for (const b of buckets)
    if (b.length < 3) throw new Error(`s3rver needs bucket names of 3+ characters: ${b}`);
  const directory = mkdtempSync(join(tmpdir(), 'fg-s3rver-'));
  const server = new S3rver({
    address: '127.0.0.1',
    port: 0,
    silent: true,
    directory,
    vhostBuckets: false,
    ...(opts.serviceEndpoint === undefined ? {} : { serviceEndpoint: opts.serviceEndpoint }),
    configureBuckets: buckets.map((name) => ({ name })),
  });
  const address = await server.run();
  return {
    url: `http://127.0.0.1:${address.port}`,
    port: address.port,
    close: async () => {
      await server.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/** One request as the verifier received it. */
export interface ReceivedRequest {
  method: string;
  /** The request target exactly as received (path and query). */
  url: string;
  rawHeaders: string[];
  bodySha256: string;
  verdict: 'verified' | 'refused';
  reason?: string;
}

export interface VerifierHandle {
  url: string;
  port: number;
  received: ReceivedRequest[];
  close(): Promise<void>;
}

const AUTH =
  /^AWS4-HMAC-SHA256 Credential=([^/,]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/;
const EMPTY_SHA256 = createHash('sha256').update('').digest('hex');

function rawValues(rawHeaders: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]?.toLowerCase() === name) out.push(rawHeaders[i + 1] ?? '');
  }
  return out;
}

/** The query as @smithy/signature-v4 wants it: decoded names to decoded value(s). */
function queryObject(query: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const part of query.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const name = decodeURIComponent(eq < 0 ? part : part.slice(0, eq));
    const value = eq < 0 ? '' : decodeURIComponent(part.slice(eq + 1));
    const prior = out[name];
    out[name] = prior === undefined ? value : Array.isArray(prior) ? [...prior, value] : [prior, value];
  }
  return out;
}

function amzDate(value: string): Date | null {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(value);
  if (m === null) return null;
  return new Date(Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!));
}

/** Why the request's signature does not verify, or null when it does. */
export async function verifySigV4(
  req: { method: string; url: string; rawHeaders: readonly string[]; body: Buffer },
  secrets: Readonly<Record<string, string>>,
): Promise<string | null> {
  const auth = rawValues(req.rawHeaders, 'authorization');
  if (auth.length !== 1) return 'no (single) Authorization header';
  const m = AUTH.exec(auth[0] ?? '');
  if (m === null) return 'not an AWS4-HMAC-SHA256 Authorization header';
  const [, accessKeyId = '', day = '', region = '', service = '', signedList = '', signature = ''] = m;
  const secretAccessKey = Object.hasOwn(secrets, accessKeyId) ? secrets[accessKeyId] : undefined;
  if (secretAccessKey === undefined) return `unknown access key ${accessKeyId}`;
  const dates = rawValues(req.rawHeaders, 'x-amz-date');
  const date = dates.length === 1 ? amzDate(dates[0] ?? '') : null;
  if (date === null) return 'no valid X-Amz-Date';
  if (!(dates[0] ?? '').startsWith(day)) return 'credential scope date differs from X-Amz-Date';
  const signed = signedList.split(';');
  if (!signed.includes('host')) return 'host is not signed';
  const headers: Record<string, string> = {};
  for (const name of signed) {
    const values = rawValues(req.rawHeaders, name);
    if (values.length === 0) return `signed header ${name} is missing`;
    headers[name] = values.join(',');
  }
  const contentSha = headers['x-amz-content-sha256'];
  if (contentSha === undefined) return 'x-amz-content-sha256 is not signed';
  if (/^[0-9a-f]{64}$/.test(contentSha)) {
    const actual = createHash('sha256').update(req.body).digest('hex');
    if (actual !== contentSha) return 'the body does not match x-amz-content-sha256';
  } else if (contentSha !== 'UNSIGNED-PAYLOAD' && !contentSha.startsWith('STREAMING-')) {
    return `unexpected x-amz-content-sha256 ${contentSha}`;
  }
  const q = req.url.indexOf('?');
  const path = q < 0 ? req.url : req.url.slice(0, q);
  let query: Record<string, string | string[]>;
  try {
    query = queryObject(q < 0 ? '' : req.url.slice(q + 1));
  } catch {
    return 'malformed query';
  }
  const signer = new SignatureV4({
    credentials: { accessKeyId, secretAccessKey },
    region,
    service,
    sha256: Sha256,
    uriEscapePath: service !== 's3', // S3 signs the path as sent, not escaped twice
    applyChecksum: false,
  });
  const signedRequest = await signer.sign(
    {
      method: req.method,
      protocol: 'http:',
      hostname: 'unused',
      path,
      query,
      headers,
      body: undefined,
    },
    { signingDate: date, signingRegion: region, signingService: service, signableHeaders: new Set(signed) },
  );
  const expected = AUTH.exec(String(signedRequest.headers['authorization'] ?? ''));
  if (expected === null) return 'the verifier could not sign';
  if (expected[5] !== signedList) return `signed headers differ: ${expected[5]} vs ${signedList}`;
  return expected[6] === signature ? null : 'signature mismatch';
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function listen(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
  });
}

/**
 * A SigV4-verifying proxy in front of `target`: a request whose signature does not
 * verify gets 403 (an S3-style XML error) and is not forwarded.
 */
export async function startSigV4Verifier(
  target: string,
  secrets: Readonly<Record<string, string>> = { [CREDENTIALS.accessKeyId]: CREDENTIALS.secretAccessKey },
): Promise<VerifierHandle> {
  const received: ReceivedRequest[] = [];
  const upstream = new URL(target);
  const server = createServer((req, res) => {
    void (async () => {
      const body = await readBody(req);
      const method = req.method ?? 'GET';
      const url = req.url ?? '/';
      const reason = await verifySigV4({ method, url, rawHeaders: req.rawHeaders, body }, secrets);
      const record: ReceivedRequest = {
        method,
        url,
        rawHeaders: [...req.rawHeaders],
        bodySha256: body.length === 0 ? EMPTY_SHA256 : createHash('sha256').update(body).digest('hex'),
        verdict: reason === null ? 'verified' : 'refused',
      };
      if (reason !== null) record.reason = reason;
      received.push(record);
      if (reason !== null) {
        res.writeHead(403, { 'content-type': 'application/xml' });
        res.end(
          `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code><Message>${reason}</Message></Error>`,
        );
        return;
      }
      const headers: Record<string, string> = {};
      for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
        const name = (req.rawHeaders[i] ?? '').toLowerCase();
        if (name === 'connection' || name === 'transfer-encoding' || name === 'keep-alive') continue;
        headers[name] =
          headers[name] === undefined
            ? (req.rawHeaders[i + 1] ?? '')
            : `${headers[name]},${req.rawHeaders[i + 1]}`;
      }
      headers['content-length'] = String(body.length);
      const out = httpRequest(
        { host: upstream.hostname, port: upstream.port, method, path: url, headers },
        (upRes) => {
          res.writeHead(upRes.statusCode ?? 502, upRes.headers);
          upRes.pipe(res);
        },
      );
      out.on('error', (err) => {
        if (!res.headersSent) res.writeHead(502);
        res.end(String(err));
      });
      out.end(body);
    })().catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500);
      res.end(String(err));
    });
  });
  const port = await listen(server);
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * A policy with one s3 upstream at `url` (`objects`) and the route `invoice-objects`:
 * `/invoices/*key`, fenced by `invoice:{key}`; `more` is added to the upstream
 * (indented lines, e.g. virtualHostDomains), `upstreams` after it and `routes` after the route.
 */
export function invoicePolicy(
  url: string,
  more: { upstream?: string; upstreams?: string; routes?: string } = {},
): string {
  return `version: 1
upstreams:
  objects:
    kind: s3
    url: ${url}
${more.upstream ?? ''}${more.upstreams ?? ''}routes:
  - name: invoice-objects
    methods: [GET, HEAD, PUT, POST, DELETE]
    path: /invoices/*key
    upstream: objects
    lock: 'invoice:{key}'
${more.routes ?? ''}`;
}

/** The S3 error `p` rejects with (it must reject with one). */
export async function s3Refusal(p: Promise<unknown>): Promise<S3ServiceException & Record<string, unknown>> {
  const outcome = await p.then(
    () => null,
    (e: unknown) => e,
  );
  if (!(outcome instanceof S3ServiceException))
    throw new Error(`expected an S3 error, got ${String(outcome)}`);
  return outcome as S3ServiceException & Record<string, unknown>;
}

export interface S3ClientOptions {
  endpoint: string;
  accessKeyId?: string;
  secretAccessKey?: string;
}

/** The real SDK client: path style, static credentials, checksums only where S3 requires them. */
export function s3Client(opts: S3ClientOptions): S3Client {
  return new S3Client({
    endpoint: opts.endpoint,
    region: REGION,
    forcePathStyle: true,
    credentials: {
      accessKeyId: opts.accessKeyId ?? CREDENTIALS.accessKeyId,
      secretAccessKey: opts.secretAccessKey ?? CREDENTIALS.secretAccessKey,
    },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 1,
  });
}

interface Stackable {
  middlewareStack: {
    add(
      mw: (
        next: (args: { request: unknown }) => Promise<unknown>,
      ) => (args: { request: unknown }) => Promise<unknown>,
      options: { step: 'build'; name: string },
    ): void;
  };
}

/**
 * Adds `Fencing-Token: <token>` to the command's request in the build step, which runs
 * before the finalize step that signs: the token is one of the signed headers.
 */
export function fenced<C>(command: C, token: bigint | number | string): C {
  (command as unknown as Stackable).middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { headers?: Record<string, string> };
      if (request.headers !== undefined) request.headers['fencing-token'] = String(token);
      return next(args);
    },
    { step: 'build', name: 'fencegateFencingToken' },
  );
  return command;
}
