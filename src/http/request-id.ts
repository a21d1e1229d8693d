/**
 * One request-id scheme on both listeners: fencegate makes every request's id (`reqId`
 * in its log lines), a random UUID; on the data listener it is also the in-flight
 * entry's id in the store and `X-Fencegate-Request-Id` upstream, so it must be unique and
 * can never be the client's. A client's own `X-Request-Id` is honoured by being logged
 * beside it (`clientReqId`, on both listeners) and passed upstream unchanged, so one
 * search finds a client's request in both logs. docs/observability.md, "Logs".
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/** The request id fencegate makes for each request. */
export function newRequestId(): string {
  return randomUUID();
}

/** Visible ASCII, 1…128 characters: anything else is not logged (it could forge log fields or flood a line). */
const CLIENT_ID = /^[\x21-\x7e]{1,128}$/;

/** The client's `X-Request-Id` when it sent exactly one sane value; else undefined. */
export function clientRequestId(headers: IncomingHttpHeaders): string | undefined {
  const value = headers['x-request-id'];
  return typeof value === 'string' && CLIENT_ID.test(value) ? value : undefined;
}
