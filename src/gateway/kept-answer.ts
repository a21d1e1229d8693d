/**
 * The answers the gateway keeps for idempotency keys (./idempotency.ts): the tap that
 * collects an upstream's answer as forwardHttp passes it on (AnswerKeeper), the bytes it
 * is kept as in the store, and its replay.
 *
 * Kept as: 4 bytes (big-endian length of the head), the head as JSON ({status, headers,
 * omitted}), then the body. Only answers that are the upstream's final word are kept:
 * not 5xx, 408 or 429 (the request may not have been done: a retry must reach the
 * upstream again). A body over KEPT_BODY_LIMIT is not kept: its status and headers are,
 * and the replay says `Idempotent-Body-Omitted: true` with an empty body.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { AnswerTap, Exchange } from './exchange.js';
import type { Headers } from './headers.js';

/** The largest answer body kept for a replay (and the largest request body a key may carry). */
export const KEPT_BODY_LIMIT = 1024 * 1024;

/** Headers of the replayed answer that are the gateway's own, not the upstream's. */
export const REPLAYED = 'idempotent-replayed';
export const BODY_OMITTED = 'idempotent-body-omitted';

/** Framing headers: the replay sets its own content-length. */
const FRAMING = new Set(['content-length', 'transfer-encoding']);

export interface KeptAnswer {
  status: number;
  headers: [string, string][];
  /** True when the body was over KEPT_BODY_LIMIT and is not kept. */
  omitted: boolean;
  body: Buffer;
}

/** Whether an upstream answer with this status is its final word on the request. */
export function keepable(status: number): boolean {
  return status < 500 && status !== 408 && status !== 429;
}

export function encodeAnswer(answer: KeptAnswer): Uint8Array {
  const head = Buffer.from(
    JSON.stringify({ status: answer.status, headers: answer.headers, omitted: answer.omitted }),
  );
  const size = Buffer.alloc(4);
  size.writeUInt32BE(head.length);
  return Buffer.concat([size, head, answer.omitted ? Buffer.alloc(0) : answer.body]);
}

export function decodeAnswer(bytes: Uint8Array): KeptAnswer {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = buf.readUInt32BE(0);
  const head = JSON.parse(buf.subarray(4, 4 + size).toString('utf8')) as Omit<KeptAnswer, 'body'>;
  return { ...head, body: buf.subarray(4 + size) };
}

/** Writes a kept answer as the answer to `ex`, marked as a replay. */
export function replayAnswer(ex: Exchange, answer: KeptAnswer): void {
  const headers: string[] = [];
  for (const [name, value] of answer.headers) if (!FRAMING.has(name)) headers.push(name, value);
  headers.push(REPLAYED, 'true');
  if (answer.omitted) headers.push(BODY_OMITTED, 'true');
  headers.push('content-length', String(answer.body.length));
  ex.res.writeHead(answer.status, headers);
  ex.res.end(answer.body);
}

/** Where a keeper's record ends: kept (the answer's bytes) or abandoned. */
export interface KeeperEnd {
  keep(answer: Uint8Array): Promise<boolean>;
  abandon(): Promise<void>;
}

/**
 * The tap of one begun request: collects the upstream's answer and ends the record once,
 * kept or abandoned. A request that never reached forwarding (refused by the fence,
 * failed before) is abandoned when its response closes.
 */
export class AnswerKeeper implements AnswerTap {
  private state: 'open' | 'forwarding' | 'ended' = 'open';
  private status = 0;
  private headers: [string, string][] = [];
  private chunks: Buffer[] = [];
  private size = 0;

  constructor(
    private readonly end: KeeperEnd,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** The client's response closed (answered, or the connection went away). */
  responseClosed(): void {
    if (this.state === 'open') this.finish(null);
  }

  forwarding(): void {
    if (this.state === 'open') this.state = 'forwarding';
  }

  head(status: number, headers: Headers): void {
    this.status = status;
    this.headers = [];
    for (const [name, value] of Object.entries(headers)) {
      if (value === undefined) continue;
      for (const v of Array.isArray(value) ? value : [value])
        this.headers.push([name.toLowerCase(), String(v)]);
    }
  }

  data(chunk: Buffer): void {
    this.size += chunk.length;
    if (this.size <= KEPT_BODY_LIMIT) this.chunks.push(chunk);
    else this.chunks = [];
  }

  complete(): void {
    if (this.status === 0 || !keepable(this.status)) return this.finish(null);
    const omitted = this.size > KEPT_BODY_LIMIT;
    const body = omitted ? Buffer.alloc(0) : Buffer.concat(this.chunks, this.size);
    this.finish(encodeAnswer({ status: this.status, headers: this.headers, omitted, body }));
  }

  failed(): void {
    this.finish(null);
  }

  answering(send: () => void): void {
    if (this.state !== 'open') return send();
    this.state = 'ended';
    this.end
      .abandon()
      .catch((err: unknown) => this.log.warn({ err }, 'the idempotency record could not be ended'))
      .finally(send);
  }

  private finish(answer: Uint8Array | null): void {
    if (this.state === 'ended') return;
    this.state = 'ended';
    this.chunks = [];
    const done = answer === null ? this.end.abandon() : this.end.keep(answer);
    done.catch((err: unknown) => {
      // The record stays in flight until its hold passes; a retry meanwhile gets 409.
      this.log.warn({ err }, 'the idempotency record could not be ended');
    });
  }
}
