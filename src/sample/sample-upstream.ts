/**
 * A tiny REST upstream for the out-of-the-box demo and for tests: the legacy
 * service that cannot check fencing tokens itself.
 *
 *   GET|HEAD /orders            list         GET|HEAD /orders/:id   read (404 if absent)
 *   PUT|POST|PATCH /orders/:id  write        DELETE /orders/:id     delete
 *   GET /_writes[?since=N]      every applied write, with its Fencing-Token
 *   GET /healthz
 *
 * Writes accept `?delayMs=N` (≤ 60000): the write is applied N ms after it
 * arrived — a slow resource, for showing the drain barrier and late applies.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { OrderBook } from './orders.js';

export interface SampleUpstreamOptions {
  host?: string;
  port?: number;
}

export interface SampleUpstream {
  url: string;
  book: OrderBook;
  close(): Promise<void>;
}

const MAX_BODY = 1024 * 1024;
const WRITES = new Set(['PUT', 'POST', 'PATCH', 'DELETE']);

export async function startSampleUpstream(options: SampleUpstreamOptions = {}): Promise<SampleUpstream> {
  const book = new OrderBook();
  const server = createServer((req, res) => {
    handle(book, req, res).catch((err: unknown) => send(res, 500, { error: String(err) }));
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 9000, options.host ?? '127.0.0.1', () => resolve());
  });
  const { address, port } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  return {
    url: `http://${host}:${port}`,
    book,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function handle(book: OrderBook, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://sample.invalid');
  const parts = url.pathname
    .split('/')
    .filter((p) => p.length > 0)
    .map(decodeURIComponent);
  const method = req.method ?? 'GET';
  const read = method === 'GET' || method === 'HEAD';

  if (read && url.pathname === '/healthz') return send(res, 200, { ok: true });
  if (read && url.pathname === '/_writes')
    return send(res, 200, book.writes(Number(url.searchParams.get('since') ?? 0)));
  if (parts[0] !== 'orders' || parts.length > 2) return send(res, 404, { error: 'not found' });
  if (parts.length === 1)
    return read ? send(res, 200, book.list()) : send(res, 405, { error: 'method not allowed' });

  const id = parts[1] ?? '';
  if (read) {
    const order = book.get(id);
    return order ? send(res, 200, order) : send(res, 404, { error: `order ${id} not found` });
  }
  if (!WRITES.has(method)) return send(res, 405, { error: 'method not allowed' });

  const raw = await readBody(req);
  if (raw === null) return send(res, 413, { error: `body larger than ${MAX_BODY} bytes` });
  const delayMs = Math.min(60_000, Math.max(0, Number(url.searchParams.get('delayMs') ?? 0) || 0));
  if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
  if (method === 'PATCH' && book.get(id) === undefined)
    return send(res, 404, { error: `order ${id} not found` });

  const { existed, order } = book.apply(method, id, parseBody(raw), {
    fencingToken: header(req, 'fencing-token'),
    requestId: header(req, 'x-fencegate-request-id'),
    lock: decoded(header(req, 'x-fencegate-lock')),
    clientRequestId: header(req, 'x-request-id'),
    writer: header(req, 'x-client-id'),
    bytes: raw.length,
  });
  if (method === 'DELETE') {
    res.writeHead(existed ? 204 : 404).end();
    return;
  }
  send(res, existed ? 200 : 201, order);
}

async function readBody(req: IncomingMessage): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) return null;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function parseBody(raw: Buffer): unknown {
  if (raw.length === 0) return null;
  const text = raw.toString('utf8');
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

function header(req: IncomingMessage, name: string): string | null {
  const v = req.headers[name];
  return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
}

function decoded(v: string | null): string | null {
  if (v === null) return null;
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(res.req.method === 'HEAD' ? undefined : text);
}
