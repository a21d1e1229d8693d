/**
 * A tiny controllable upstream for slow/hung-upstream scenarios, recording applied writes
 * in the sample's format (OrderBook, GET /_writes) so appliedFromSample reads it.
 *
 *   PUT [/<group>]/orders/:id[?hold=GATE][&delayMs=N]
 *                                         a write; with hold=GATE it is applied only when the
 *                                         test opens GATE — even if the gateway gave up on it
 *                                         meanwhile (a late apply, as a queue would do); the
 *                                         group of plain /orders/:id is "orders"
 *   GET /_writes                          the applied-writes log
 *
 * Per group the test can set the mode to 'hang': writes are received, never answered and
 * never applied (a hung service). Everything the upstream sees is also appended to an
 * event log in arrival order (received, client-closed, applied), the ground truth for
 * "was this forwarded before that finished".
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { OrderBook } from '../../../src/sample/orders.js';
import { sleep } from '../../helpers/wait.js';

export type UpstreamEvent =
  | {
      type: 'received';
      group: string;
      requestId: string | null;
      token: string | null;
      /** The gateway's local port of the connection it came on (which process sent it). */
      port: number | null;
    }
  | { type: 'client-closed'; group: string; requestId: string | null }
  | { type: 'applied'; group: string; requestId: string | null; seq: number };

export interface GatedUpstream {
  url: string;
  book: OrderBook;
  events: UpstreamEvent[];
  setMode(group: string, mode: 'ok' | 'hang'): void;
  /** Lets writes held at `gate` go on (now and later). */
  open(gate: string): void;
  received(group: string): number;
  /** Index in `events` of the first event matching, or -1. */
  indexOf(type: UpstreamEvent['type'], requestId: string): number;
  close(): Promise<void>;
}

export async function startGatedUpstream(): Promise<GatedUpstream> {
  const book = new OrderBook();
  const events: UpstreamEvent[] = [];
  const modes = new Map<string, 'ok' | 'hang'>();
  const gates = new Map<string, { open: boolean; waiters: (() => void)[] }>();
  const gate = (name: string) => {
    let g = gates.get(name);
    if (!g) gates.set(name, (g = { open: false, waiters: [] }));
    return g;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://upstream.invalid');
    if (req.method === 'GET' && url.pathname === '/_writes') return send(res, 200, book.writes());
    const parts = url.pathname
      .split('/')
      .filter((p) => p.length > 0)
      .map(decodeURIComponent);
    if (parts.length < 2 || parts[parts.length - 2] !== 'orders' || req.method === 'GET')
      return send(res, 404, { error: 'not found' });
    const group = parts[0] as string; // 'orders' for plain /orders/:id
    const id = parts[parts.length - 1] as string;
    const requestId = header(req, 'x-request-id');
    events.push({
      type: 'received',
      group,
      requestId,
      token: header(req, 'fencing-token'),
      port: req.socket.remotePort ?? null,
    });
    let answered = false;
    res.once('close', () => {
      if (!answered) events.push({ type: 'client-closed', group, requestId });
    });
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks);
    if ((modes.get(group) ?? 'ok') === 'hang') return; // never answered, never applied
    const hold = url.searchParams.get('hold');
    if (hold !== null) {
      const g = gate(hold);
      if (!g.open) await new Promise<void>((r) => g.waiters.push(r));
    }
    const delayMs = Math.min(60_000, Math.max(0, Number(url.searchParams.get('delayMs') ?? 0) || 0));
    if (delayMs > 0) await sleep(delayMs);
    let body: unknown = raw.toString('utf8');
    try {
      body = JSON.parse(body as string);
    } catch {
      /* keep text */
    }
    const lockHeader = header(req, 'x-fencegate-lock');
    const { existed, order } = book.apply(req.method ?? 'PUT', id, body, {
      fencingToken: header(req, 'fencing-token'),
      requestId: header(req, 'x-fencegate-request-id'),
      lock: lockHeader === null ? null : decodeURIComponent(lockHeader),
      clientRequestId: requestId,
      writer: header(req, 'x-client-id'),
      bytes: raw.length,
    });
    events.push({ type: 'applied', group, requestId, seq: book.writes().length });
    answered = true;
    if (!res.destroyed) send(res, existed ? 200 : 201, order);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent && !res.destroyed) send(res, 500, { error: String(err) });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    book,
    events,
    setMode: (group, mode) => void modes.set(group, mode),
    open(name) {
      const g = gate(name);
      g.open = true;
      for (const w of g.waiters.splice(0)) w();
    },
    received: (group) => events.filter((e) => e.type === 'received' && e.group === group).length,
    indexOf: (type, requestId) => events.findIndex((e) => e.type === type && e.requestId === requestId),
    close: () =>
      new Promise<void>((resolve) => {
        for (const g of gates.values()) for (const w of g.waiters.splice(0)) w();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function header(req: IncomingMessage, name: string): string | null {
  const v = req.headers[name];
  return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
