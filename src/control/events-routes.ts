/**
 * GET /v1/events (the recent events, filtered) and GET /v1/events/stream (Server-Sent
 * Events: the same filters, live, resumable with Last-Event-ID), on the control listener.
 * docs/events.md is the contract.
 *
 * A subscriber's unsent bytes are bounded (`maxBufferBytes`): a consumer that does not
 * keep up is disconnected rather than allowed to grow the server's memory; it resumes
 * with Last-Event-ID from what the ring still holds. Each event is made into its frame
 * once, however many subscribers it goes to (they share the string), and live frames go
 * out together at most every `flushMs` (one socket write for many events). The streams open at
 * once are capped (`maxStreams`), and per principal with an auth file
 * (`maxStreamsPerPrincipal`): past a cap a new stream gets 429 `too-many-streams`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { accessOf, visibleKeys } from '../auth/access.js';
import { ProblemError } from '../errors.js';
import { matches, type EventFilter, type EventLog, type FenceEvent } from '../observe/events.js';
import { parseEventQuery } from '../observe/event-query.js';

export interface EventsRoutesOptions {
  events: EventLog;
  /** A comment line this often keeps proxies and the browser from timing the stream out. Default 15 s. */
  heartbeatMs?: number;
  /** Unsent bytes a subscriber may have before it is dropped. Default 1 MiB. */
  maxBufferBytes?: number;
  /** How long (ms) live frames wait to go out together. Default 50. */
  flushMs?: number;
  /** Streams open at once at most. Default 64. */
  maxStreams?: number;
  /** Streams one principal may have open at once (with an auth file). Default 8. */
  maxStreamsPerPrincipal?: number;
}

/** How long (s) a client refused for too many streams is told to wait. */
const STREAMS_RETRY_AFTER_S = 5;

/** How long (ms) the browser waits before reconnecting a dropped stream. */
const RETRY_MS = 2000;
/** Bytes handed to the socket before waiting for it to drain. */
const SOCKET_HIGH_WATER = 64 * 1024;

/** Frames made, by event: one JSON.stringify per event for all its subscribers. */
const frames = new WeakMap<FenceEvent, string>();

function frame(e: FenceEvent): string {
  let f = frames.get(e);
  if (f === undefined) {
    f = `id: ${e.id}\ndata: ${JSON.stringify(e)}\n\n`;
    frames.set(e, f);
  }
  return f;
}

/** Counts open streams, in all and per principal; refuses one past a cap. */
class StreamCaps {
  private total = 0;
  private readonly byPrincipal = new Map<string, number>();

  constructor(
    private readonly max: number,
    private readonly perPrincipal: number,
  ) {}

  /** Takes a place for a stream of `principal` (null: no auth file), or throws 429; returns its release. */
  take(principal: string | null): () => void {
    if (this.total >= this.max)
      throw tooMany(`at most ${this.max} event streams are open at once`, 'all', this.max);
    const mine = principal === null ? 0 : (this.byPrincipal.get(principal) ?? 0);
    if (principal !== null && mine >= this.perPrincipal)
      throw tooMany(
        `principal "${principal}" has ${mine} event streams open, the most one principal may`,
        'principal',
        this.perPrincipal,
      );
    this.total += 1;
    if (principal !== null) this.byPrincipal.set(principal, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total -= 1;
      if (principal === null) return;
      const left = (this.byPrincipal.get(principal) ?? 1) - 1;
      if (left === 0) this.byPrincipal.delete(principal);
      else this.byPrincipal.set(principal, left);
    };
  }
}

function tooMany(detail: string, scope: 'all' | 'principal', limit: number): ProblemError {
  return new ProblemError(
    'too-many-streams',
    detail,
    { scope, limit },
    { headers: { 'retry-after': String(STREAMS_RETRY_AFTER_S) } },
  );
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
  const flushMs = opts.flushMs ?? 50;
  // Waiting frames are sent at once past this, well before the bound drops the consumer.
  const pumpAtBytes = Math.min(SOCKET_HIGH_WATER, maxBufferBytes / 4);
  const caps = new StreamCaps(opts.maxStreams ?? 64, opts.maxStreamsPerPrincipal ?? 8);
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
    const access = accessOf(request);
    const release = caps.take(access.enforced ? (access.principal?.name ?? '') : null);
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
      if (flushTimer !== null) clearTimeout(flushTimer);
      streams.delete(end);
      release();
      if (how === 'drop') res.destroy();
      else res.end();
    };
    const end = () => stop('end');
    // Frames go out together: what waits is joined into one write (a socket write per
    // event per subscriber is what a flood of events would cost the process otherwise).
    const pump = () => {
      const batch: string[] = [];
      let bytes = res.writableLength;
      while (!ended && bytes < SOCKET_HIGH_WATER) {
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
          break;
        }
        batch.push(chunk);
        bytes += chunk.length;
      }
      if (batch.length > 0 && !ended) res.write(batch.length === 1 ? (batch[0] as string) : batch.join(''));
    };
    let flushTimer: NodeJS.Timeout | null = null;
    const flushSoon = () => {
      flushTimer ??= setTimeout(() => {
        flushTimer = null;
        pump();
      }, flushMs);
    };
    const send = (chunk: string) => {
      if (ended) return;
      queue.push(chunk);
      queuedBytes += chunk.length;
      if (queuedBytes > maxBufferBytes)
        stop('drop'); // a consumer that does not keep up
      else if (queuedBytes >= pumpAtBytes)
        pump(); // enough to send now
      else flushSoon();
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
