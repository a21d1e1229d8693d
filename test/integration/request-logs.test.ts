/**
 * Logs by convention (docs/observability.md, "Logs"): one request-id scheme on both
 * listeners (a UUID fencegate makes; the client's X-Request-Id logged beside it as
 * `clientReqId`), and probes logged at debug whatever they answer, a /readyz 503 while
 * no worker is ready included.
 */
import { IncomingMessage, ServerResponse } from 'node:http';
import { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AccessRecorder } from '../../src/gateway/access.js';
import { Exchange } from '../../src/gateway/exchange.js';
import { createMetrics } from '../../src/observe/metrics.js';
import { openTestControl, type TestControl } from '../helpers/control.js';
import { answerViolations } from '../helpers/openapi.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
type Line = Record<string, unknown> & { level: number; msg: string };

let app: FastifyInstance;
let control: TestControl;
const lines: Line[] = [];

beforeAll(async () => {
  const logger = pino({ level: 'debug' }, { write: (l: string) => void lines.push(JSON.parse(l) as Line) });
  // As while `serve --workers 2` starts: none ready yet, so /readyz answers 503.
  control = await openTestControl('embedded', { logger, workers: () => ({ ready: 0, configured: 2 }) });
  app = control.app;
});
afterAll(() => control.close());

const accessLines = (path: string) => lines.filter((l) => l.msg === 'request' && l.path === path);

describe('control listener logs', () => {
  it('logs /readyz and /healthz at debug, a 503 included', async () => {
    const ready = await app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(503);
    expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    const probes = [...accessLines('/readyz'), ...accessLines('/healthz')];
    expect(probes.map((l) => [l.path, l.status, l.level])).toEqual([
      ['/readyz', 503, 20],
      ['/healthz', 200, 20],
    ]);
  });

  it('makes a UUID request id and logs the client X-Request-Id beside it', async () => {
    const r = await app.inject({
      method: 'GET',
      url: '/v1/locks/nothing-here',
      headers: { 'x-request-id': 'client-abc-1' },
    });
    expect(r.statusCode).toBe(404);
    const [line] = accessLines('/v1/locks/nothing-here');
    expect(line).toMatchObject({ level: 30, clientReqId: 'client-abc-1', listener: 'control' });
    expect(String(line?.reqId)).toMatch(UUID);
  });

  it('does not log a client id that could forge a field or flood the line', async () => {
    await app.inject({ method: 'GET', url: '/v1/locks/other', headers: { 'x-request-id': 'x'.repeat(129) } });
    const [line] = accessLines('/v1/locks/other');
    expect(line).not.toHaveProperty('clientReqId');
    expect(String(line?.reqId)).toMatch(UUID);
  });
});

describe('data listener logs', () => {
  it('uses the same scheme: a UUID reqId, the client X-Request-Id as clientReqId', () => {
    const out: Line[] = [];
    const log = pino({ level: 'info' }, { write: (l: string) => void out.push(JSON.parse(l) as Line) });
    const req = new IncomingMessage(new Socket());
    req.method = 'GET';
    req.url = '/nowhere';
    req.headers = { 'x-request-id': 'client-abc-2' };
    const res = new ServerResponse(req);
    res.statusCode = 404;
    new AccessRecorder(createMetrics({ defaultMetrics: false }), 1, log).answered(
      new Exchange(req, res, log, false),
    );
    expect(out).toHaveLength(1);
    expect(out[0]).toMatchObject({ msg: 'request', clientReqId: 'client-abc-2' });
    expect(String(out[0]?.reqId)).toMatch(UUID);
  });
});

describe('docs/openapi.json', () => {
  it('describes every answer this file got from the control API', () => {
    expect(answerViolations()).toEqual([]);
  });
});
