/**
 * The Exchange outlives its request's socket: undici sets `socket = null` on an
 * IncomingMessage it sent as a body once the body is written, and the access log reads
 * the client's address after the answer finished. A throw there would be an uncaught
 * exception in a 'finish' listener: the process would exit.
 */
import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
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
});
