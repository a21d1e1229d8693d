/**
 * The data listener's per-request record: counted always, logged at info for the sampled
 * share, and with the level above info no logger is made for the request (pino's child()
 * serialises its bindings: a cost on every request for a line nobody writes).
 */
import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { AccessRecorder } from '../../src/gateway/access.js';
import { Exchange } from '../../src/gateway/exchange.js';
import { createMetrics } from '../../src/observe/metrics.js';

function answered(level: string): { children: number; lines: string[]; noRoute: number } {
  const lines: string[] = [];
  const log = pino({ level }, { write: (line: string) => lines.push(line) });
  const child = vi.spyOn(log, 'child');
  const metrics = createMetrics({ defaultMetrics: false });
  const req = new IncomingMessage(new Socket());
  req.method = 'GET';
  req.url = '/nowhere';
  const res = new ServerResponse(req);
  res.statusCode = 404;
  new AccessRecorder(metrics, 1, log).answered(new Exchange(req, res, log, false));
  return { children: child.mock.calls.length, lines, noRoute: metrics.noRoute[4]?.n ?? 0 };
}

describe('AccessRecorder', () => {
  it('counts the answer and makes no logger for it when the level is above info', () => {
    expect(answered('warn')).toEqual({ children: 0, lines: [], noRoute: 1 });
  });

  it('writes the access line at info, through a logger bound to the request id', () => {
    const { children, lines, noRoute } = answered('info');
    expect([children, lines.length, noRoute]).toEqual([1, 1, 1]);
    expect(JSON.parse(lines[0] ?? '{}')).toMatchObject({ msg: 'request', path: '/nowhere', status: 404 });
    expect(JSON.parse(lines[0] ?? '{}')).toHaveProperty('reqId');
  });
});
