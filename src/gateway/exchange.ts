/**
 * One request on the data listener as every step of the data plane sees it: node's
 * request and response, the request id, the route state once routed, the body to
 * forward, and the gateway's own answers (a problem, or a kind's own answer). The
 * upstream's answers are written to `res` directly by the forward step.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { FastifyBaseLogger } from 'fastify';
import { PROBLEM_CONTENT_TYPE, type ProblemError } from '../errors.js';
import { problemHeaders, type ProblemFormat } from '../http/problems.js';
import { newRequestId } from '../http/request-id.js';
import type { GatewayRequestState } from './context.js';
import type { Headers } from './headers.js';

/** What forwardHttp tells the keeper of a request's answer for an idempotency key (./kept-answer.ts). */
export interface AnswerTap {
  /** The request is about to be handed to the upstream: from now on the tap decides its record. */
  forwarding(): void;
  /** The upstream's status and (cleaned) headers. */
  head(status: number, headers: Headers): void;
  data(chunk: Buffer): void;
  complete(): void;
  /** No answer, or one that broke off. */
  failed(): void;
  /**
   * The gateway is about to answer this request itself (a refusal, an error): `send`
   * writes the answer. A tap whose request was never forwarded ends its record first and
   * then sends, so a retry the client sends on reading the answer finds the key free.
   */
  answering(send: () => void): void;
}

/** Methods whose body is never forwarded (fastify's rule before the data plane left it). */
const BODYLESS = new Set(['GET', 'HEAD', 'TRACE']);

export class Exchange {
  readonly method: string;
  /** The peer's address, read on arrival (a finished response's request no longer has its socket). */
  readonly peer: string;
  /** When the request arrived (performance.now()), for the access log's duration. */
  readonly arrived: number = performance.now();
  /** Routed: the matched route and, once the fence ran, its verdict. */
  state: GatewayRequestState | null = null;
  /** What is forwarded as the body: the request stream itself, or bytes the fence read from it. */
  body: NodeJS.ReadableStream | Buffer | null;
  /**
   * How the gateway's refusals of this request are written: null, problem+json; else the
   * format of the kind whose upstream the request is addressed to (routing.ts sets it).
   */
  format: ProblemFormat | null = null;
  /** Set when the upstream's answer is kept for an idempotency key (./idempotency.ts): forwardHttp feeds it. */
  tap: AnswerTap | null = null;
  private ownHeaders: Record<string, string> | null = null;
  private logger: FastifyBaseLogger | null = null;
  private madeId: string | null = null;

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    private readonly rootLog: FastifyBaseLogger,
    /** X-Forwarded-For and -Proto from the peer are believed (the gateway runs behind a load balancer). */
    readonly trustProxy: boolean,
  ) {
    this.method = req.method ?? 'GET';
    this.peer = req.socket.remoteAddress ?? 'unknown';
    this.body = hasBody(req, this.method) ? req : null;
  }

  /**
   * The request id (the in-flight entry's, X-Fencegate-Request-Id, the log's reqId), made
   * on first use: a write refused before it reached the store is answered without one.
   */
  get id(): string {
    return (this.madeId ??= newRequestId());
  }

  get headers(): IncomingMessage['headers'] {
    return this.req.headers;
  }

  /** This request's logger (bound to its id), made on first use. */
  get log(): FastifyBaseLogger {
    return (this.logger ??= this.rootLog.child({ reqId: this.id }));
  }

  /** The client's address: the first X-Forwarded-For entry when the proxy is trusted, else the peer's. */
  get ip(): string {
    const peer = this.peer;
    if (!this.trustProxy) return peer;
    const xff = this.req.headers['x-forwarded-for'];
    const first = (Array.isArray(xff) ? xff.join(',') : (xff ?? '')).split(',')[0]?.trim() ?? '';
    return first.length > 0 ? first : peer;
  }

  /** The scheme the client used: the last X-Forwarded-Proto entry when the proxy is trusted. */
  get protocol(): string {
    if (this.trustProxy) {
      const proto = this.req.headers['x-forwarded-proto'];
      const last = (Array.isArray(proto) ? proto.join(',') : (proto ?? '')).split(',').pop()?.trim();
      if (last !== undefined && last.length > 0) return last;
    }
    return (this.req.socket as TLSSocket | null)?.encrypted === true ? 'https' : 'http';
  }

  /** Whether an answer (the gateway's own or the upstream's) has started. */
  get sent(): boolean {
    return this.res.headersSent;
  }

  /** A header for the gateway's own answer. */
  header(name: string, value: string): void {
    (this.ownHeaders ??= {})[name.toLowerCase()] = value;
  }

  /**
   * The gateway's own answer: `body` whole (`bytes` long, counted when not given), with
   * the headers set so far. The headers go to node as one flat list: no object is built
   * or walked by key for an answer a stale flood gives thousands of times a second.
   */
  answer(status: number, contentType: string | null, body: string | null, bytes?: number): void {
    if (this.tap === null) return this.writeAnswer(status, contentType, body, bytes);
    this.tap.answering(() => this.writeAnswer(status, contentType, body, bytes));
  }

  private writeAnswer(status: number, contentType: string | null, body: string | null, bytes?: number): void {
    const headers: (string | number)[] = [];
    const own = this.ownHeaders;
    if (own !== null) for (const name in own) headers.push(name, own[name]!);
    if (contentType !== null) headers.push('content-type', contentType);
    if (body !== null) headers.push('content-length', bytes ?? Buffer.byteLength(body));
    this.res.writeHead(status, headers);
    this.res.end(body ?? undefined);
  }

  /** A refusal or error, as problem+json or in the format of the request's upstream's kind. */
  answerProblem(problem: ProblemError): void {
    const headers = problemHeaders(problem, this.req);
    for (const name in headers) this.header(name, headers[name]!);
    const format = this.format;
    if (format === null) {
      this.answer(problem.status, PROBLEM_CONTENT_TYPE, problem.json(), problem.jsonBytes());
      return;
    }
    const formatted = format.render(problem, this.id);
    for (const name in formatted.headers) this.header(name, formatted.headers[name]!);
    this.answer(problem.status, format.contentType, formatted.body);
  }
}

function hasBody(req: IncomingMessage, method: string): boolean {
  if (BODYLESS.has(method)) return false;
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}
