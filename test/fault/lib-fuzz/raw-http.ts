/**
 * Raw HTTP/1.1 over node:net for the fuzzer: send exact bytes, read back whatever
 * comes, and parse it leniently into responses. No HTTP client library is involved,
 * so malformed requests reach the server exactly as written.
 */
import { connect } from 'node:net';

export interface RawResponse {
  status: number;
  reason: string;
  /** Lower-cased names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  body: Buffer;
  /** True when the body was cut short by the connection closing. */
  truncated: boolean;
}

export interface RawExchange {
  /** Final responses, in order (interim 1xx responses are in `interim`). */
  responses: RawResponse[];
  interim: number[];
  /** The server closed (or reset) the connection. */
  closed: boolean;
  /** We gave up waiting: the server kept the connection open without (more) answers. */
  timedOut: boolean;
  /** Bytes that did not parse as a response (should always be empty). */
  garbage: string;
  ms: number;
}

export interface SendOptions {
  /** Give up after this long in total. */
  timeoutMs: number;
  /** After at least `expect` final responses, wait this long for more before hanging up. */
  quietMs: number;
  /** How many final responses to wait for before the quiet period starts (default 1). */
  expect?: number;
  /** Methods of the requests in order, so responses to HEAD are read without a body. */
  methods?: string[];
}

export function sendRaw(port: number, bytes: Buffer, opts: SendOptions): Promise<RawExchange> {
  const started = performance.now();
  return new Promise((resolve) => {
    const sock = connect({ host: '127.0.0.1', port });
    const chunks: Buffer[] = [];
    let closed = false;
    let done = false;
    let quiet: NodeJS.Timeout | null = null;
    const finish = (timedOut: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(total);
      if (quiet) clearTimeout(quiet);
      sock.destroy();
      const parsed = parseResponses(Buffer.concat(chunks), opts.methods ?? [], closed);
      resolve({ ...parsed, closed, timedOut, ms: performance.now() - started });
    };
    const total = setTimeout(() => finish(!closed), opts.timeoutMs);
    sock.on('data', (d: Buffer) => {
      chunks.push(d);
      const { responses } = parseResponses(Buffer.concat(chunks), opts.methods ?? [], false);
      const complete = responses.filter((r) => !r.truncated).length;
      if (complete >= (opts.expect ?? 1)) {
        if (quiet) clearTimeout(quiet);
        quiet = setTimeout(() => finish(false), opts.quietMs);
      }
    });
    sock.on('error', () => undefined); // ECONNRESET/EPIPE: the server hung up on us; 'close' follows
    sock.on('close', () => {
      closed = true;
      finish(false);
    });
    sock.on('connect', () => {
      sock.write(bytes, () => undefined);
    });
  });
}

function parseResponses(
  buf: Buffer,
  methods: string[],
  eof: boolean,
): { responses: RawResponse[]; interim: number[]; garbage: string } {
  const responses: RawResponse[] = [];
  const interim: number[] = [];
  let pos = 0;
  while (pos < buf.length) {
    const headEnd = buf.indexOf('\r\n\r\n', pos);
    if (headEnd < 0) break;
    const head = buf.subarray(pos, headEnd).toString('latin1');
    const lines = head.split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3}) ?(.*)$/.exec(lines[0] ?? '');
    if (!m) return { responses, interim, garbage: buf.subarray(pos).toString('latin1').slice(0, 200) };
    const status = Number(m[1]);
    const headers: Record<string, string> = {};
    for (const line of lines.slice(1)) {
      const i = line.indexOf(':');
      if (i <= 0) continue;
      const name = line.slice(0, i).trim().toLowerCase();
      const value = line.slice(i + 1).trim();
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
    }
    pos = headEnd + 4;
    if (status >= 100 && status < 200) {
      interim.push(status);
      continue;
    }
    const method = (methods[responses.length] ?? '').toUpperCase();
    let body: Buffer = Buffer.alloc(0);
    let truncated = false;
    if (method === 'HEAD' || status === 204 || status === 304) {
      // no body
    } else if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
      const parts: Buffer[] = [];
      let ok = false;
      while (true) {
        const lineEnd = buf.indexOf('\r\n', pos);
        if (lineEnd < 0) break;
        const size = parseInt(buf.subarray(pos, lineEnd).toString('latin1'), 16);
        if (!Number.isFinite(size)) break;
        if (size === 0) {
          const end = buf.indexOf('\r\n\r\n', lineEnd);
          if (end < 0) break;
          pos = end + 4;
          ok = true;
          break;
        }
        if (lineEnd + 2 + size + 2 > buf.length) break;
        parts.push(buf.subarray(lineEnd + 2, lineEnd + 2 + size));
        pos = lineEnd + 2 + size + 2;
      }
      body = Buffer.concat(parts);
      if (!ok) {
        truncated = true;
        pos = buf.length;
      }
    } else if (headers['content-length'] !== undefined) {
      const len = Number(headers['content-length']);
      body = buf.subarray(pos, Math.min(buf.length, pos + len));
      truncated = body.length < len;
      pos += body.length;
    } else {
      // Read until close.
      body = buf.subarray(pos);
      truncated = !eof;
      pos = buf.length;
    }
    responses.push({ status, reason: m[2] ?? '', headers, body, truncated });
  }
  return { responses, interim, garbage: '' };
}

/** A short printable rendering of raw bytes, for reports (\r\n kept visible). */
export function showBytes(b: Buffer, max = 600): string {
  const s = JSON.stringify(b.toString('latin1'));
  return s.length > max ? `${s.slice(0, max)}…(${b.length} bytes)` : s;
}
