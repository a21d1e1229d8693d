/** Sending refusals as RFC 9457 problems, and the gateway's error and not-found handlers. */
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { PROBLEM_CONTENT_TYPE, ProblemError } from '../errors.js';
import { awaitingContinue } from './continue.js';

export function sendProblem(reply: FastifyReply, problem: ProblemError): FastifyReply {
  for (const [name, value] of Object.entries(problem.headers)) reply.header(name, value);
  // Refused before 100 Continue: the announced body was never asked for; do not reuse the connection.
  if (awaitingContinue(reply.request.raw)) reply.header('connection', 'close');
  return reply.code(problem.status).type(PROBLEM_CONTENT_TYPE).send(problem.toBody());
}

export function notFoundHandler(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return sendProblem(
    reply,
    new ProblemError('no-route', `no route for ${request.method} ${pathOf(request.url)}`),
  );
}

/** ProblemErrors pass through; fastify's own client errors become bad-request; anything else is internal. */
export function errorHandler(
  error: FastifyError | ProblemError,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  if (error instanceof ProblemError) return sendProblem(reply, error);
  const status = error.statusCode ?? 500;
  if (status === 413) return sendProblem(reply, new ProblemError('payload-too-large', error.message));
  if (status >= 400 && status < 500)
    return sendProblem(reply, new ProblemError('bad-request', error.message));
  request.log.error({ err: error }, 'gateway internal error');
  return sendProblem(reply, new ProblemError('internal', 'internal error', { requestId: request.id }));
}

export function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}
