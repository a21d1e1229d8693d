/**
 * A raw HTTP/1.1 client for the refusal lane's differential tests: it writes a connection's
 * bytes in planned pieces with planned gaps, reads the answers at a planned pace (fast, slow,
 * or not at all for a while), and records what came back. The same plan sent to a gateway
 * with the lane and to one without must come back the same; timing only shapes the input,
 * nothing is asserted on it.
 */
import { connect, type Socket } from 'node:net';
import { connect as connectTls } from 'node:tls';
import { sleep } from './wait.js';

/** One write: `bytes`, written `gapMs` after the previous one (or after connecting). */
export interface Piece {
  bytes: Buffer | string;
  gapMs: number;
}

/** How the client reads its answers. */
export type ReadPace =
  | { kind: 'fast' }
  /** Reads for `onMs`, then reads nothing for `offMs`, and again. */
  | { kind: 'slow'; onMs: number; offMs: number }
  /** Reads nothing for `forMs`, then fast. */
  | { kind: 'paused'; forMs: number };

export interface Conversation {
  /** Everything received, as latin1 text. */
  text: string;
  /** The status of every answer received, in order. */
  statuses: number[];
  /** The gateway closed (or reset) the connection. */
  closed: boolean;
}

export interface ConverseOptions {
  pace: ReadPace;
  /** Answers expected: once they are in and `quietMs` passed with nothing more, the client hangs up. */
  answers: number;
  quietMs?: number;
  /** The client gives up after this long, with what it has (default 20 s). */
  timeoutMs?: number;
  /** TLS, trusting this CA. */
  tlsCa?: string | Buffer;
}

const STATUS_LINE = /HTTP\/1\.[01] (\d{3}) /g;

/** Sends `pieces` on one connection to 127.0.0.1:`port`, reading at `opts.pace`. */
export function converse(port: number, pieces: Piece[], opts: ConverseOptions): Promise<Conversation> {
  return new Promise((resolve) => {
    const socket: Socket =
      opts.tlsCa === undefined
        ? connect(port, '127.0.0.1')
        : connectTls({ port, host: '127.0.0.1', ca: opts.tlsCa });
    const quietMs = opts.quietMs ?? 150;
    let text = '';
    let scanned = 0;
    const statuses: number[] = [];
    let finished = false;
    let quiet: NodeJS.Timeout | undefined;
    const giveUp = setTimeout(() => finish(false), opts.timeoutMs ?? 20_000);
    const finish = (closed: boolean) => {
      if (finished) return;
      finished = true;
      clearTimeout(quiet);
      clearTimeout(giveUp);
      socket.destroy();
      resolve({ text, statuses, closed });
    };
    const settle = () => {
      clearTimeout(quiet);
      if (statuses.length >= opts.answers) quiet = setTimeout(() => finish(false), quietMs);
    };
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      // Status lines are found in the new text, from a little before it (a line split across reads).
      STATUS_LINE.lastIndex = Math.max(0, scanned - 13);
      for (let m = STATUS_LINE.exec(text); m !== null; m = STATUS_LINE.exec(text)) {
        if (m.index + m[0].length > scanned) statuses.push(Number(m[1]));
      }
      scanned = text.length;
      settle();
    });
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('error', () => finish(true));
    void read(socket, opts.pace, () => finished);
    void write(socket, pieces, () => finished);
  });
}

async function write(socket: Socket, pieces: Piece[], done: () => boolean): Promise<void> {
  for (const piece of pieces) {
    if (piece.gapMs > 0) await sleep(piece.gapMs);
    if (done() || socket.destroyed) return;
    socket.write(piece.bytes);
  }
}

async function read(socket: Socket, pace: ReadPace, done: () => boolean): Promise<void> {
  if (pace.kind === 'fast') return;
  socket.pause();
  if (pace.kind === 'paused') {
    await sleep(pace.forMs);
    socket.resume();
    return;
  }
  while (!done()) {
    socket.resume();
    await sleep(pace.onMs);
    socket.pause();
    await sleep(pace.offMs);
  }
}

/** What reached an upstream, as compared between the two gateways. */
export function upstreamView(hits: { method: string; url: string; headers: object; body?: Buffer }[]) {
  return hits.map((h) => {
    const headers = h.headers as Record<string, string | string[] | undefined>;
    return {
      method: h.method,
      url: h.url,
      seq: headers['x-seq'],
      a: headers['x-a'],
      token: headers['fencing-token'],
      body: h.body?.toString('latin1'),
    };
  });
}

/** Received text with what differs by nature (Date, request ids) made constant. */
export function normalize(text: string): string {
  return text
    .replace(/^(date): [^\r]*/gim, '$1: *')
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, '<uuid>');
}

/** Where two long texts first differ (with a little of each), or null when they do not. */
export function firstDifference(a: string, b: string): string | null {
  if (a === b) return null;
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  const show = (t: string) => JSON.stringify(t.slice(i, i + 80));
  return `at byte ${i} of ${a.length}/${b.length}: ${show(a)} vs ${show(b)}`;
}
