/**
 * Turns every error and unmatched route on a fastify instance into an RFC 9457
 * problem, so no listener ever answers with fastify's default error shape.
 */
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import { PROBLEM_CONTENT_TYPE, ProblemError, problemBody, StoreUnavailableError } from '../errors.js';
import type { ProblemCode } from '../errors.js';

export function sendProblem(
  reply: FastifyReply,
  code: ProblemCode,
  detail?: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): FastifyReply {
  const body = problemBody(code, detail, extra);
  for (const [k, v] of Object.entries(headers)) reply.header(k, v);
  return reply.code(body.status).type(PROBLEM_CONTENT_TYPE).send(body);
}

/** Maps fastify's own client errors (bad JSON, too large, bad URL…) to our codes. */
function codeForClientError(err: FastifyError): ProblemCode {
  if (err.statusCode === 413) return 'payload-too-large';
  if (err.statusCode === 404) return 'not-found';
  if (err.statusCode === 405) return 'method-not-allowed';
  return 'bad-request';
}

/**
 * For fastify's `frameworkErrors` option: errors raised before routing (a URL that
 * does not decode, an unsupported content type) become problems too.
 */
export function frameworkErrorsAsProblems(err: FastifyError, _req: unknown, reply: FastifyReply): void {
  sendProblem(reply, codeForClientError(err), err.message);
}

export function installProblemHandlers(app: FastifyInstance, options: { notFound?: ProblemCode } = {}): void {
  const notFound = options.notFound ?? 'not-found';
  app.setNotFoundHandler((req, reply) => {
    sendProblem(reply, notFound, `${req.method} ${req.url.split('?')[0] ?? ''} matches no route`);
  });
  app.setErrorHandler((err: FastifyError, req, reply) => {
    if (err instanceof ProblemError) {
      return sendProblem(reply, err.code, err.message, err.extra, err.headers);
    }
    if (err instanceof StoreUnavailableError) {
      req.log.warn({ err }, 'store unavailable');
      return sendProblem(
        reply,
        'store-unavailable',
        'the lock store cannot be reached; try again',
        {},
        {
          'retry-after': '1',
        },
      );
    }
    const status = err.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      return sendProblem(reply, codeForClientError(err), err.message);
    }
    req.log.error({ err }, 'internal error');
    return sendProblem(reply, 'internal', 'internal error');
  });
}
