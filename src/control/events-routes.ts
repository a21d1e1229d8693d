/**
 * GET /v1/events (the recent events, filtered) and GET /v1/events/stream (Server-Sent
 * Events: the same filters, live, resumable with Last-Event-ID), on the control listener.
 * docs/events.md is the contract.
 *
 * A subscriber's unsent bytes are bounded (`maxBufferBytes`): a consumer that does not
 * keep up is disconnected rather than allowed to grow the server's memory; it resumes
 * with Last-Event-ID from what the ring still holds.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { visibleKeys } from '../auth/access.js';
import { ProblemError } from '../errors.js';
import { matches, type EventFilter, type EventLog, type FenceEvent } from '../observe/events.js';
import { parseEventQuery } from '../observe/event-query.js';

export interface EventsRoutesOptions {
  events: EventLog;
  /** A comment line this often keeps proxies and the browser from timing the stream out. Default 15 s. */
  heartbeatMs?: number;
  /** Unsent bytes a subscriber may have before it is dropped. Default 1 MiB. */
  maxBufferBytes?: number;
}

/** How long (ms) the browser waits before reconnecting a dropped stream. */
const RETRY_MS = 2000;
/** Bytes handed to the socket before waiting for it to drain. */
const SOCKET_HIGH_WATER = 64 * 1024;

function frame(e: FenceEvent): string {
  return `id: ${e.id}\ndata: ${JSON.stringify(e)}\n\n`;
}

function lastEventId(request: FastifyRequest): number | null {
  const header = request.headers['last-event-id'];
  if (header === undefined) return null;
  if (typeof header !== 'string' || !/^(0|[1-9][0-9]{0,15})$/.test(header.trim())) {
    throw new ProblemError('invalid-query', 'Last-Event-ID must be an event id (a whole number)', {
      parameter: 'Last-Event-ID',
    });
  }
  return Number(header.trim());
}

/** With an auth file: only the events of locks under the principal's `events` prefixes. */
function restrict(filter: EventFilter, request: FastifyRequest): void {
  const visible = visibleKeys(request, 'events');
  if (visible !== undefined) filter.lockVisible = visible;
}

async function eventsRoutes(app: FastifyInstance, opts: EventsRoutesOptions): Promise<void> {
  const { events } = opts;
  const heartbeatMs = opts.heartbeatMs ?? 15_000;
  const maxBufferBytes = opts.maxBufferBytes ?? 1024 * 1024;
  const streams = new Set<() => void>();
  // preClose: before the server waits for its connections, which streams would hold open.
  app.addHook('preClose', async () => {
    for (const end of [...streams]) end();
  });

  app.get('/v1/events', async (request) => {
    const { filter, limit } = parseEventQuery(request.query, { stream: false });
    restrict(filter, request);
    return { total: events.total, oldest: events.oldestId, events: events.recent(limit, filter) };
  });

  // No automatic HEAD route: a HEAD would open a stream that sends nothing and never ends.
  app.get('/v1/events/stream', { exposeHeadRoute: false }, (request: FastifyRequest, reply: FastifyReply) => {
    const { filter } = parseEventQuery(request.query, { stream: true });
    restrict(filter, request);
    const resumeFrom = lastEventId(request);
    const live: EventFilter = { ...filter };
    delete live.afterId;
    delete live.fromTime;

    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    // Replay and subscribe in the same tick: nothing recorded in between is lost.
    let backlog: FenceEvent[] = [];
    let gap: object | null = null;
    const afterId = resumeFrom ?? filter.afterId;
    if (afterId !== undefined) {
      const oldest = events.oldestId;
      if (afterId > events.total) {
        // An id from before this process started (ids restart with it): everything is new.
        gap = { after: afterId, oldest, latest: events.total, restarted: true };
        backlog = events.after(0, live);
      } else {
        if (oldest !== null && afterId < oldest - 1) {
          gap = { after: afterId, oldest, latest: events.total, restarted: false };
        }
        backlog = events.after(afterId, live);
      }
    } else if (filter.fromTime !== undefined) {
      backlog = events.after(0, { ...live, fromTime: filter.fromTime });
    }

    // What waits to be written: the replayed backlog (events the ring holds anyway, not
    // counted), then live frames (counted against maxBufferBytes). The socket gets more
    // only while its own buffer is below SOCKET_HIGH_WATER.
    let replayAt = 0;
    const queue: string[] = [];
    let queueAt = 0;
    let queuedBytes = 0;
    let ended = false;
    const stop = (how: 'end' | 'drop') => {
      if (ended) return;
      ended = true;
      unsubscribe();
      clearInterval(heartbeat);
      streams.delete(end);
      if (how === 'drop') res.destroy();
      else res.end();
    };
    const end = () => stop('end');
    const pump = () => {
      while (!ended && res.writableLength < SOCKET_HIGH_WATER) {
        let chunk: string;
        const replayed = backlog[replayAt];
        if (replayed !== undefined) {
          replayAt += 1;
          chunk = frame(replayed);
        } else if (queueAt < queue.length) {
          chunk = queue[queueAt] as string;
          queueAt += 1;
          queuedBytes -= chunk.length;
          if (queueAt === queue.length) {
            queue.length = 0;
            queueAt = 0;
          }
        } else {
          return;
        }
        res.write(chunk);
      }
    };
    const send = (chunk: string) => {
      if (ended) return;
      queue.push(chunk);
      queuedBytes += chunk.length;
      if (queuedBytes > maxBufferBytes)
        stop('drop'); // a consumer that does not keep up
      else pump();
    };
    const unsubscribe = events.subscribe((e) => {
      if (matches(e, live)) send(frame(e));
    });
    const heartbeat = setInterval(() => send(': heartbeat\n\n'), heartbeatMs);
    heartbeat.unref();
    streams.add(end);
    res.on('close', end);
    res.on('drain', pump);

    res.write(`retry: ${RETRY_MS}\n: fencegate events, latest ${events.total}\n\n`);
    if (gap !== null) res.write(`event: gap\ndata: ${JSON.stringify(gap)}\n\n`);
    pump();
  });
}

export default fp(eventsRoutes, { name: 'fencegate-events', fastify: '5.x' });
