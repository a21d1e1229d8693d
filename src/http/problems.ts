/**
 * Every refusal and error on both listeners is an RFC 9457 problem, sent one way:
 * `sendProblem(reply, ProblemError)`. The error, not-found and framework-error handlers
 * installed here map fastify's and Node's own errors the same way on the data and the
 * control listener; only the code for "no route" differs (`no-route` on the data
 * listener, part of the proxy's contract; `not-found` on the control listener).
 */
import type { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  STATUS_CODES,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { Socket } from 'node:net';
import {
  PROBLEM_CONTENT_TYPE,
  PROBLEMS,
  ProblemError,
  StoreUnavailableError,
  problemBody,
  type ProblemCode,
} from '../errors.js';
import { awaitingContinue } from './continue.js';

export function sendProblem(reply: FastifyReply, problem: ProblemError): FastifyReply {
  for (const [name, value] of Object.entries(problemHeaders(problem, reply.request.raw))) {
    reply.header(name, value);
  }
  return reply.code(problem.status).type(PROBLEM_CONTENT_TYPE).send(problem.toBody());
}

/**
 * Another way to write a refusal than problem+json, for clients that read only their own
 * error format (kind: s3: S3's XML `<Error>` document, so S3 SDKs raise a named error).
 * Chosen per request by the kind of the route's upstream (src/gateway/exchange.ts).
 */
export interface ProblemFormat {
  readonly contentType: string;
  /** The body answering `problem` on the request with id `requestId`, and headers of its own. */
  render(problem: ProblemError, requestId: string): FormattedProblem;
}

export interface FormattedProblem {
  body: string;
  headers: Readonly<Record<string, string>>;
}

/** The headers a problem is answered with, besides its content type. */
export function problemHeaders(problem: ProblemError, req: IncomingMessage): Record<string, string> {
  // Refused before 100 Continue: the announced body was never asked for; do not reuse the connection.
  return awaitingContinue(req) ? { ...problem.headers, connection: 'close' } : problem.headers;
}

/** Shorthand for sendProblem(reply, new ProblemError(…)). */
export function refuse(
  reply: FastifyReply,
  code: ProblemCode,
  detail?: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): FastifyReply {
  return sendProblem(reply, new ProblemError(code, detail, extra, { headers }));
}

export function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/** The problem for an error fastify or a handler raised (never a bare 500 for client errors). */
export function problemFor(
  error: FastifyError | Error,
  request: { readonly log: FastifyBaseLogger; readonly id: string; readonly headers?: IncomingHttpHeaders },
): ProblemError {
  if (error instanceof ProblemError) return error;
  if (error instanceof StoreUnavailableError) {
    request.log.warn({ err: error }, 'store unavailable');
    return new ProblemError(
      'store-unavailable',
      'the lock store cannot be reached; try again',
      {},
      { headers: { 'retry-after': '1' } },
    );
  }
  const status = (error as FastifyError).statusCode ?? 500;
  if (status === 413) return new ProblemError('payload-too-large', error.message);
  if (status === 415) {
    const sent = request.headers?.['content-type'];
    return new ProblemError(
      'unsupported-media-type',
      `${sent === undefined ? 'a body without a content-type' : `content-type "${sent}"`}: ` +
        'this endpoint reads "content-type: application/json"',
    );
  }
  if (status === 404) return new ProblemError('not-found', error.message);
  if (status === 405) return new ProblemError('method-not-allowed', error.message);
  if (status >= 400 && status < 500) return new ProblemError('bad-request', error.message);
  request.log.error({ err: error }, 'internal error');
  return new ProblemError('internal', 'internal error', { requestId: request.id });
}

export function errorHandler(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) {
  return sendProblem(reply, problemFor(error, request));
}

/**
 * Node's HTTP parser refused the bytes before there was a request (a bad request line or
 * header, headers too large, a request that did not arrive in time): the answer is a
 * problem like every other refusal, then the connection closes. Given to fastify as its
 * `clientErrorHandler` on both listeners.
 */
export function clientErrorProblem(err: Error & { code?: string }, socket: Socket): void {
  // A reset connection, or one with an answer already under way, gets nothing more.
  if (err.code === 'ECONNRESET' || !socket.writable || socket.bytesWritten > 0) {
    socket.destroy();
    return;
  }
  const code: ProblemCode =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? 'headers-too-large'
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? 'request-timeout'
        : 'bad-request';
  const detail = `the HTTP parser refused the request${err.code ? ` (${err.code})` : ''}`;
  socket.end(rawProblem(code, detail));
}

/** A whole HTTP/1.1 answer carrying a problem, for a socket node:http no longer answers on; it closes the connection. */
function rawProblem(code: ProblemCode, detail: string, extra: Record<string, unknown> = {}): string {
  const { status } = PROBLEMS[code];
  const body = JSON.stringify(problemBody(code, detail, extra));
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n` +
    `content-type: ${PROBLEM_CONTENT_TYPE}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
    `connection: close\r\n\r\n${body}`
  );
}

/**
 * Fastify apps that answer a missing Host themselves: Node's own check (`requireHostHeader`)
 * would answer a bare 400 with no body. Both listeners take these server options.
 */
export const HTTP_SERVER_OPTIONS = { requireHostHeader: false };

/**
 * An `Expect` other than 100-continue: Node answers 417 by itself (no body) unless the
 * server listens for `checkExpectation`; this answers it as a problem, on both listeners.
 */
export function refuseUnknownExpectations(server: Server): void {
  server.on('checkExpectation', (_req: IncomingMessage, res: ServerResponse) => {
    const body = JSON.stringify(
      problemBody('expectation-failed', 'only "Expect: 100-continue" is supported'),
    );
    res.writeHead(PROBLEMS['expectation-failed'].status, {
      'content-type': PROBLEM_CONTENT_TYPE,
      'content-length': Buffer.byteLength(body),
      connection: 'close',
    });
    res.end(body);
  });
}

/**
 * Methods node:http never hands to a request handler: `CONNECT` goes to the server's
 * 'connect' event, and without a listener Node closes the connection without a word.
 * Answered here instead, on both listeners, as a 405 problem (fencegate is not a forward
 * proxy) before the connection closes: the connection is a tunnel from here on, so it is
 * not reused. (An `Upgrade` request without an 'upgrade' listener is served as a plain
 * request by Node, and answered by the routes like any other.)
 */
export function refuseTunnels(server: Server): void {
  server.on('connect', (req: IncomingMessage, socket: Socket) => {
    socket.on('error', () => socket.destroy());
    const method = req.method ?? 'CONNECT';
    socket.end(
      rawProblem('method-not-allowed', `${method} is not served here: fencegate is not a forward proxy`, {
        method,
      }),
    );
  });
}

/** An HTTP/1.1 request without a Host header (RFC 9112 §3.2 says 400), as a problem; null when it has one. */
export function missingHost(req: IncomingMessage): ProblemError | null {
  if (req.headers.host !== undefined || req.httpVersion !== '1.1') return null;
  return new ProblemError('bad-request', 'an HTTP/1.1 request must carry a Host header');
}

/**
 * Installs the error and not-found handlers. `notFound` is the code for a request that
 * matches no route (the detail is the same on every listener).
 */
export function installProblemHandlers(app: FastifyInstance, notFound: 'no-route' | 'not-found'): void {
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, new ProblemError(notFound, `no route for ${request.method} ${pathOf(request.url)}`)),
  );
}
