/**
 * A strict reader of one HTTP/1.1 request head, for the refusal lane (./lane.ts):
 * it takes only the plainest requests, whole in the bytes at hand, and says null to
 * anything else, which node:http then reads as it always does. Null is never an error
 * here: a head split across reads, HTTP/1.0, a chunked or announced (Expect) body, an
 * upgrade, a repeated header, a byte llhttp might read differently (a bare CR or LF, a
 * folded line, a control character, a tab or obs-text byte in Content-Length or
 * Connection) all go to node:http, which answers or refuses them.
 */

export interface RequestHead {
  method: string;
  /** The request target, origin-form (starts with "/"), as node gives it (bytes as latin1). */
  url: string;
  /** Lower-case names; each name at most once (a repeated one makes the head not the lane's). */
  headers: Record<string, string>;
  /** Names as sent and values without surrounding whitespace, alternating, as node's rawHeaders. */
  rawHeaders: string[];
  /** The offset just past the blank line that ends the head. */
  end: number;
  /** Content-Length (0 when absent). */
  bodyLength: number;
  /** The client sent `Connection: close`. */
  close: boolean;
}

/** Methods the lane reads; any other goes to node:http. */
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);
/** More header lines than this: not the lane's (node's own limit is far higher). */
const MAX_HEADERS = 64;
const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');
const VERSION = Buffer.from(' HTTP/1.1\r\n', 'latin1');
const CR = 0x0d;
const LF = 0x0a;
const SP = 0x20;
const HTAB = 0x09;
const COLON = 0x3a;

/** tchar (RFC 9110): method and header-name bytes. */
const TOKEN = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~") TOKEN[c.charCodeAt(0)] = 1;
for (let c = 0x30; c <= 0x39; c++) TOKEN[c] = 1;
for (let c = 0x41; c <= 0x5a; c++) TOKEN[c] = 1;
for (let c = 0x61; c <= 0x7a; c++) TOKEN[c] = 1;

/** Request-target bytes: visible ASCII. */
const TARGET = new Uint8Array(256);
for (let c = 0x21; c <= 0x7e; c++) TARGET[c] = 1;

/** Field-value bytes: HTAB, SP, visible ASCII, obs-text. */
const FIELD = new Uint8Array(256);
FIELD[HTAB] = 1;
for (let c = 0x20; c <= 0x7e; c++) FIELD[c] = 1;
for (let c = 0x80; c <= 0xff; c++) FIELD[c] = 1;

const DIGITS = /^[0-9]{1,15}$/;
const SPACES = /^ +| +$/g;

/**
 * The head starting at `start` in `buf` when it is whole there, at most `maxBytes` long
 * and one the lane takes; else null.
 */
export function readRequestHead(buf: Buffer, start: number, maxBytes: number): RequestHead | null {
  const stop = buf.indexOf(HEAD_END, start);
  if (stop < 0 || stop + 4 - start > maxBytes) return null;
  // Every scan below ends at the CR at `stop` at the latest: CR is in none of the tables.
  let i = start;
  while (TOKEN[buf[i]!] === 1) i++;
  if (i === start || buf[i] !== SP) return null;
  const method = buf.toString('latin1', start, i);
  if (!METHODS.has(method)) return null;
  const target = ++i;
  if (buf[i] !== 0x2f) return null;
  while (TARGET[buf[i]!] === 1) i++;
  const url = buf.toString('latin1', target, i);
  // The request line's CRLF is at `stop` at the latest.
  if (i + VERSION.length > stop + 2) return null;
  if (buf.compare(VERSION, 0, VERSION.length, i, i + VERSION.length) !== 0) return null;
  i += VERSION.length;

  const headers: Record<string, string> = Object.create(null) as Record<string, string>;
  const rawHeaders: string[] = [];
  let bodyLength = 0;
  let close = false;
  // The head's last line ends at `stop`; the blank line follows it.
  while (i < stop + 2) {
    if (rawHeaders.length === 2 * MAX_HEADERS) return null;
    const nameStart = i;
    while (TOKEN[buf[i]!] === 1) i++;
    if (i === nameStart || buf[i] !== COLON) return null;
    const nameEnd = i++;
    while (buf[i] === SP || buf[i] === HTAB) i++;
    const valueStart = i;
    let valueEnd = i;
    // A tab or obs-text byte anywhere in the line: Content-Length and Connection are then
    // left to llhttp, whose reading of them differs from a plain trim.
    let plain = true;
    for (;;) {
      const c = buf[i]!;
      if (c === CR) break;
      if (FIELD[c] !== 1) return null;
      i++;
      if (c === HTAB || c >= 0x80) plain = false;
      if (c !== SP && c !== HTAB) valueEnd = i;
    }
    if (buf[i + 1] !== LF) return null;
    i += 2;
    const name = buf.toString('latin1', nameStart, nameEnd);
    const value = buf.toString('latin1', valueStart, valueEnd);
    const lower = name.toLowerCase();
    if (headers[lower] !== undefined) return null;
    // Proxy-Connection llhttp reads as Connection; Set-Cookie node makes an array; a
    // `__proto__` field node cannot make a key of its headers object.
    switch (lower) {
      case 'transfer-encoding':
      case 'expect':
      case 'upgrade':
      case 'proxy-connection':
      case 'set-cookie':
      case '__proto__':
        return null;
      case 'content-length':
        if (!plain || !DIGITS.test(value)) return null;
        bodyLength = Number(value);
        break;
      case 'connection':
        if (!plain) return null;
        for (const option of value.toLowerCase().split(',')) {
          const o = option.replace(SPACES, '');
          if (o === 'upgrade') return null;
          if (o === 'close') close = true;
        }
        break;
    }
    headers[lower] = value;
    rawHeaders.push(name, value);
  }
  return { method, url, headers, rawHeaders, end: stop + 4, bodyLength, close };
}
