/**
 * Every refusal and error on both listeners is an RFC 9457 problem, sent one way:
 * `sendProblem(reply, ProblemError)`. The error, not-found and framework-error handlers
 * installed here map fastify's and Node's own errors the same way on the data and the
 * control listener; only the code for "no route" differs (`no-route` on the data
 * listener, part of the proxy's contract; `not-found` on the control listener).
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { PROBLEM_CONTENT_TYPE, ProblemError, StoreUnavailableError, type ProblemCode } from '../errors.js';
import { awaitingContinue } from './continue.js';

export function sendProblem(reply: FastifyReply, problem: ProblemError): FastifyReply {
  for (const [name, value] of Object.entries(problem.headers)) reply.header(name, value);
  // Refused before 100 Continue: the announced body was never asked for; do not reuse the connection.
  if (awaitingContinue(reply.request.raw)) reply.header('connection', 'close');
  return reply.code(problem.status).type(PROBLEM_CONTENT_TYPE).send(problem.toBody());
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
export function problemFor(error: FastifyError | Error, request: FastifyRequest): ProblemError {
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
 * Installs the error and not-found handlers. `notFound` is the code for a request that
 * matches no route (the detail is the same on every listener).
 */
export function installProblemHandlers(app: FastifyInstance, notFound: 'no-route' | 'not-found'): void {
  app.setErrorHandler(errorHandler);
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, new ProblemError(notFound, `no route for ${request.method} ${pathOf(request.url)}`)),
  );
}
