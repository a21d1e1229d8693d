/**
 * The Exchange outlives its request's socket: undici sets `socket = null` on an
 * IncomingMessage it sent as a body once the body is written, and the access log reads
 * the client's address after the answer finished. A throw there would be an uncaught
 * exception in a 'finish' listener: the process would exit.
 */
import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket as NetSocket } from 'node:net';
import { Socket } from 'node:net';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { ProblemError } from '../../src/errors.js';
import { Exchange } from '../../src/gateway/exchange.js';

function request(headers: Record<string, string>): IncomingMessage {
  const socket = new Socket();
  Object.defineProperty(socket, 'remoteAddress', { value: '10.0.0.7' });
  const req = new IncomingMessage(socket);
  req.method = 'PUT';
  req.headers = headers;
  return req;
}

describe('Exchange', () => {
  const log = pino({ level: 'silent' });

  it("keeps the client's address and scheme after the request lost its socket", () => {
    const req = request({ 'content-length': '2' });
    const ex = new Exchange(req, new ServerResponse(req), log, false);
    (req as { socket: unknown }).socket = null;
    expect(ex.ip).toBe('10.0.0.7');
    expect(ex.protocol).toBe('http');
  });

  it('believes X-Forwarded-For and -Proto only with trustProxy', () => {
    const headers = { 'x-forwarded-for': ' 1.2.3.4 , 5.6.7.8', 'x-forwarded-proto': 'http, https' };
    const req = request(headers);
    const trusted = new Exchange(req, new ServerResponse(req), log, true);
    expect([trusted.ip, trusted.protocol]).toEqual(['1.2.3.4', 'https']);
    const untrusted = new Exchange(req, new ServerResponse(req), log, false);
    expect([untrusted.ip, untrusted.protocol]).toEqual(['10.0.0.7', 'http']);
  });

  it('forwards a body only when the request has one, and never for GET, HEAD or TRACE', () => {
    const body = (method: string, headers: Record<string, string>) => {
      const req = request(headers);
      req.method = method;
      return new Exchange(req, new ServerResponse(req), log, false).body !== null;
    };
    expect(body('PUT', { 'content-length': '2' })).toBe(true);
    expect(body('DELETE', { 'transfer-encoding': 'chunked' })).toBe(true);
    expect(body('PUT', { 'content-length': '0' })).toBe(false);
    expect(body('POST', {})).toBe(false);
    expect(body('GET', { 'content-length': '2' })).toBe(false);
  });

  it("answers a problem with its own headers, the problem's type and its length in bytes", async () => {
    const problem = new ProblemError('stale-token', 'token 5 is older than 7 for lock "größe"', {
      lock: 'größe',
    });
    const sockets = new Set<NetSocket>();
    const server = createServer((req, res) => {
      const ex = new Exchange(req, res, log, false);
      ex.header('Retry-After', '1');
      ex.answerProblem(problem);
    });
    server.on('connection', (s) => sockets.add(s));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const res = await fetch(`http://127.0.0.1:${port}/x`, { method: 'PUT', body: 'x' });
      const body = Buffer.from(await res.arrayBuffer());
      expect(res.status).toBe(409);
      expect(res.headers.get('content-type')).toBe('application/problem+json');
      expect(res.headers.get('retry-after')).toBe('1');
      expect(Number(res.headers.get('content-length'))).toBe(body.length);
      expect(body.toString('utf8')).toBe(problem.json());
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
