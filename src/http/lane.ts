/**
 * The refusal lane: a new connection's requests are read here first, and those whose
 * answer needs no waiting (a stale flood's writes, refused from the stale-write cache;
 * no route; a missing or malformed token) are answered here, below node:http. The first
 * request that is anything else (it goes upstream, waits for the store, or is not the
 * plainest HTTP/1.1: request-head.ts) hands the connection, from that request's first
 * byte on, to node:http, which serves it and every later request on it as it always did.
 *
 * Why: node:http spends ~26 µs of CPU on each request it parses and answers, whatever the
 * answer; a refusal from the cache is ~12 µs of fencegate's own work on top. A stale flood
 * is refusals only, and they cost the gateway a third of an admitted write's CPU, not
 * less, until they stop passing through node:http (docs/adr/0017-refusal-lane.md).
 *
 * Nothing about a request's answer changes: the data plane decides it with the same steps
 * (DataPlane.answerNow runs routing and the fence's refuseNow, which do nothing at all
 * unless they answer), and the answer's bytes are those node:http would write (status
 * line, the plane's headers, Date, Connection and Keep-Alive). A refused request's body
 * is read and dropped as node:http drops an unread one; answers leave in request order.
 *
 * The handoff keeps the connection's bytes in wire order whatever the timing of the
 * client's writes and reads: node:http gets the bytes the lane did not serve, and anything
 * the socket already holds behind them, before any byte it reads from the kernel itself,
 * and nothing of the lane is left on the socket (LaneConnection.leave says how, and why it
 * holds; docs/adr/0017-refusal-lane.md, "The handoff").
 */
import { maxHeaderSize as defaultMaxHeaderSize, STATUS_CODES } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { Server as TlsServer } from 'node:tls';
import { readRequestHead, type RequestHead } from './request-head.js';

/** Answers the request now (true), or does nothing (false): node:http will serve it. */
export type AnswerNow = (req: IncomingMessage, res: ServerResponse) => boolean;

type Listener = (socket: Socket) => void;

export interface RefusalLane {
  /** The listener is closing: idle lane connections are closed, busy ones after their request. */
  close(): void;
  /** Connections in the lane now (for tests). */
  readonly connections: number;
}

/**
 * Puts the lane in front of `server`'s connections. Installed before the server listens:
 * node:http's own connection listeners (and any added before) run on handoff.
 */
export function installRefusalLane(server: Server, answerNow: AnswerNow): RefusalLane {
  const event = server instanceof TlsServer ? 'secureConnection' : 'connection';
  const node = server.listeners(event) as Listener[];
  server.removeAllListeners(event);
  const live = new Set<LaneConnection>();
  let closed = false;
  const lane = {
    server,
    answerNow,
    get closed() {
      return closed;
    },
    handOff(socket: Socket): void {
      for (const listener of node) listener.call(server, socket);
    },
    left(c: LaneConnection): void {
      live.delete(c);
    },
  };
  server.on(event, (socket: Socket) => {
    if (closed || (server.maxRequestsPerSocket ?? 0) > 0) return lane.handOff(socket);
    live.add(new LaneConnection(socket, lane));
  });
  return {
    close() {
      closed = true;
      for (const c of [...live]) c.closeWhenIdle();
    },
    get connections() {
      return live.size;
    },
  };
}

interface Lane {
  readonly server: Server;
  readonly answerNow: AnswerNow;
  readonly closed: boolean;
  handOff(socket: Socket): void;
  left(c: LaneConnection): void;
}

class LaneConnection {
  /** Body bytes of a refused request still to read and drop. */
  private dropping = 0;
  private readonly onData = (chunk: Buffer) => this.read(chunk);
  private readonly onEnd = () => this.socket.end();
  private readonly onError = () => this.socket.destroy();
  private readonly onTimeout = () => this.socket.destroy();
  private readonly onClose = () => this.lane.left(this);

  constructor(
    private readonly socket: Socket,
    private readonly lane: Lane,
  ) {
    socket.on('data', this.onData);
    socket.on('end', this.onEnd);
    socket.on('error', this.onError);
    socket.on('close', this.onClose);
    // As node:http does between requests on a kept-alive connection.
    socket.setTimeout(lane.server.keepAliveTimeout, this.onTimeout);
  }

  /** The listener closes: now when no request is under way, else once its body is read. */
  closeWhenIdle(): void {
    if (this.dropping === 0) this.socket.destroy();
  }

  private read(chunk: Buffer): void {
    let at = 0;
    if (this.dropping > 0) {
      at = Math.min(this.dropping, chunk.length);
      this.dropping -= at;
      if (this.dropping === 0 && at === chunk.length && this.lane.closed) return this.finish();
      if (at === chunk.length) return;
    }
    const socket = this.socket;
    let stop: number;
    socket.cork();
    try {
      stop = this.answerFrom(chunk, at);
    } finally {
      socket.uncork();
    }
    if (stop === FINISHED) return this.finish();
    if (stop !== ANSWERED) return this.leave(chunk, stop);
    // A client that sends without reading its answers is read from again once they left.
    if (!socket.destroyed && socket.writableLength > socket.writableHighWaterMark) {
      socket.pause();
      socket.once('drain', () => socket.resume());
    }
  }

  /**
   * Answers the requests in `chunk` from `at` on, until one is not the lane's: ANSWERED
   * (all of them), FINISHED (an answer closes the connection), or the offset of the first
   * request the lane leaves to node:http.
   */
  private answerFrom(chunk: Buffer, at: number): number {
    const { socket, lane } = this;
    const maxBytes = (lane.server as { maxHeaderSize?: number }).maxHeaderSize ?? defaultMaxHeaderSize;
    while (at < chunk.length) {
      if (lane.closed) return at;
      const head = readRequestHead(chunk, at, maxBytes);
      if (head === null) return at;
      const req = new LaneRequest(head, socket);
      const res = new LaneAnswer(head, socket, lane.server.keepAliveTimeout);
      // The plane reads of a request only what LaneRequest has, and answers through
      // writeHead and end, when it answers now (DataPlane.answerNow).
      if (!lane.answerNow(req as unknown as IncomingMessage, res as unknown as ServerResponse)) return at;
      if (res.closes) return FINISHED;
      at = head.end;
      const body = Math.min(head.bodyLength, chunk.length - at);
      at += body;
      this.dropping = head.bodyLength - body;
    }
    return ANSWERED;
  }

  /**
   * Hands the connection to node:http, `chunk` from `at` unread: called from the socket's
   * 'data' event, so the socket is flowing and its handle is not yet node:http's.
   *
   * node:http's connection listener "consumes" the handle (`parser.consume`): from then on
   * llhttp reads the kernel's bytes straight from the handle, and only bytes in the
   * socket's JavaScript buffer still travel through 'data' events. So the handoff must
   * leave no byte behind in JavaScript that a kernel read could overtake, and must leave
   * the handle to node:http alone (lib/_http_server.js drives it with its 'pause' and
   * 'resume' listeners: readStop while `socket._paused`, readStart after). Three steps:
   *
   * 1. Everything the Readable holds behind `chunk` (read while the lane was paused for a
   *    client that does not read its answers) is taken out with `read()`. Emptying the
   *    buffer also makes `read()` call `_read` one last time (net starts the handle if a
   *    full buffer had stopped it) and marks the stream as reading: a stream that reads
   *    never calls `_read` again until a push, and a consumed handle pushes nothing but
   *    its end. Without this, the `read(0)` of a maybeReadMore tick (Readable schedules
   *    one after each push) would restart the handle behind node:http's back once it has
   *    paused the socket: kernel bytes into a paused parser (HPE_PAUSED, a reset).
   * 2. node:http's listeners take the socket and consume the handle. No tick passes
   *    between step 1 and step 3, so no kernel read can reach llhttp in between (the
   *    first handoff waited for a tick, and a pause of the lane's in that window let
   *    llhttp read the kernel's bytes before those put back: ADR 0017's addendum).
   * 3. The bytes the lane did not serve, then those taken in step 1, go to node:http's
   *    'data' listener at once, in one piece, as if read from the handle: llhttp parses
   *    them before anything the handle reads next. If their requests make node:http
   *    pause the socket (answers backing up), it does so through the socket, which is
   *    still flowing, so its 'pause' listener stops the handle.
   *
   * Nothing of the lane is left on the socket: no listener, pause, drain hook or timeout.
   */
  private leave(chunk: Buffer, at: number): void {
    const socket = this.socket;
    this.detach();
    const unread = [chunk.subarray(at)];
    for (let held = socket.read() as Buffer | null; held !== null; held = socket.read() as Buffer | null) {
      unread.push(held);
    }
    this.lane.handOff(socket);
    const bytes = unread.length === 1 ? unread[0]! : Buffer.concat(unread);
    if (bytes.length > 0 && !socket.destroyed) socket.emit('data', bytes);
  }

  /** The last answer is written: nothing more is read, the connection is closed once it left. */
  private finish(): void {
    const socket = this.socket;
    this.detach();
    socket.on('error', () => undefined);
    socket.end(() => socket.destroy());
  }

  private detach(): void {
    const socket = this.socket;
    socket.removeListener('data', this.onData);
    socket.removeListener('end', this.onEnd);
    socket.removeListener('error', this.onError);
    socket.removeListener('close', this.onClose);
    socket.setTimeout(0);
    socket.removeListener('timeout', this.onTimeout);
    this.lane.left(this);
  }
}

/** answerFrom's outcomes besides an offset to hand over from. */
const ANSWERED = -1;
const FINISHED = -2;

/** What the data plane reads of a request the lane holds: node's IncomingMessage's names. */
class LaneRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: Record<string, string>;
  readonly rawHeaders: string[];
  readonly httpVersion = '1.1';
  readonly complete: boolean;

  constructor(
    head: RequestHead,
    readonly socket: Socket,
  ) {
    this.method = head.method;
    this.url = head.url;
    this.headers = head.headers;
    this.rawHeaders = head.rawHeaders;
    this.complete = head.bodyLength === 0;
  }
}

/**
 * The answer to a request the lane holds, written as node:http writes it: status line, the
 * plane's headers, then Date, and Connection with Keep-Alive (or close).
 */
class LaneAnswer {
  statusCode = 200;
  headersSent = false;
  writableFinished = false;
  /** The connection ends after this answer. */
  closes: boolean;
  private headers: readonly (string | number)[] = [];

  constructor(
    private readonly head: RequestHead,
    private readonly socket: Socket,
    private readonly keepAliveMs: number,
  ) {
    this.closes = head.close;
  }

  writeHead(status: number, headers: readonly (string | number)[]): this {
    this.statusCode = status;
    this.headers = headers;
    return this;
  }

  end(body?: string): void {
    let text = `HTTP/1.1 ${this.statusCode} ${STATUS_CODES[this.statusCode] ?? 'unknown'}\r\n`;
    let own = false;
    let length = false;
    const headers = this.headers;
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i] as string;
      const value = headers[i + 1]!;
      text += `${name}: ${value}\r\n`;
      if (name === 'connection') {
        own = true;
        if (String(value).toLowerCase() === 'close') this.closes = true;
      } else if (name === 'content-length') length = true;
    }
    if (!length) text += `content-length: ${body === undefined ? 0 : Buffer.byteLength(body)}\r\n`;
    text += `Date: ${httpDate()}\r\n`;
    if (!own) {
      if (this.closes) text += 'Connection: close\r\n';
      else {
        text += 'Connection: keep-alive\r\n';
        if (this.keepAliveMs > 0) text += `Keep-Alive: timeout=${Math.floor(this.keepAliveMs / 1000)}\r\n`;
      }
    }
    text += '\r\n';
    if (body !== undefined && this.head.method !== 'HEAD') text += body;
    this.headersSent = true;
    this.writableFinished = true;
    this.socket.write(text);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** The Date header's value, made once per second. */
let dateSecond = -1;
let dateText = '';
function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateText = new Date(now).toUTCString();
  }
  return dateText;
}
