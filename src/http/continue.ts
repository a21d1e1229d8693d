/**
 * `Expect: 100-continue`, judged before the client uploads. Node answers 100 Continue
 * on its own as soon as the headers arrive, unless the server has a `checkContinue`
 * listener; the gateway installs one that hands the request to fastify like any
 * other, and sends 100 Continue itself only when the request is about to be
 * forwarded (after routing, the fence and the drain barrier). A refusal is the final
 * status without any 100, with `Connection: close`, since the client may or may not
 * send the body it announced and the connection could not be reused reliably.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';

const continued = new WeakSet<IncomingMessage>();

/** Makes `server` leave 100 Continue to sendContinue() instead of sending it on arrival. */
export function deferContinue(server: Server): void {
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    server.emit('request', req, res);
  });
}

/** Whether the client asked for 100 Continue before sending its body. */
export function expectsContinue(req: IncomingMessage): boolean {
  const expect = req.headers.expect;
  return typeof expect === 'string' && /(?:^|\W)100-continue(?:$|\W)/i.test(expect);
}

/** The request is admitted and about to be forwarded: let the client send its body. */
export function sendContinue(req: IncomingMessage, res: ServerResponse): void {
  if (!expectsContinue(req) || continued.has(req) || res.headersSent || res.destroyed) return;
  continued.add(req);
  res.writeContinue();
}

/** True when the client is still waiting for 100 Continue (its body, if any, is unread). */
export function awaitingContinue(req: IncomingMessage): boolean {
  return expectsContinue(req) && !continued.has(req);
}
