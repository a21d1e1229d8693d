/**
 * Reading a request body whole, when the gateway must see it before deciding (a Postgres
 * row write, the key list of an S3 DeleteObjects): bounded in size (413 without reading
 * further) and in time, like a streamed upload (408 after `idleMs` without a byte or
 * `totalMs` in all). Bodies that stream through are never read this way.
 */
import type { Readable } from 'node:stream';
import { ProblemError } from '../errors.js';

export interface BodyLimits {
  maxBytes: number;
  idleMs: number;
  totalMs: number;
  /** Says what the limit is for, in the 413's detail ("a row write's body"). */
  what: string;
  /**
   * Registers a way to stop the read early with a problem (e.g. the gateway's session
   * lapsed); returns its unregistration, called when the read ends.
   */
  stopWhen?: (stop: (problem: ProblemError) => void) => () => void;
}

export type BodyRead = { ok: true; body: Buffer } | { ok: false; problem: ProblemError };

export function readBoundedBody(
  stream: Readable,
  contentLength: string | undefined,
  limits: BodyLimits,
): Promise<BodyRead> {
  const tooLarge = (): BodyRead => ({
    ok: false,
    problem: new ProblemError('payload-too-large', `${limits.what} is limited to ${limits.maxBytes} bytes`, {
      limit: limits.maxBytes,
    }),
  });
  if (
    contentLength !== undefined &&
    /^[0-9]+$/.test(contentLength) &&
    Number(contentLength) > limits.maxBytes
  ) {
    return Promise.resolve(tooLarge());
  }
  return new Promise<BodyRead>((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // One timer for both limits, armed for whichever comes first and re-armed when it
    // fires early: a body that arrives in a few chunks costs one timer, not one per chunk.
    const started = performance.now();
    let lastByte = started;
    let timer: NodeJS.Timeout;
    // The registration of `limits.stopWhen`, made below before any listener: finish() ends it.
    const stop: { unregister?: () => void } = {};
    const finish = (result: BodyRead) => {
      clearTimeout(timer);
      stop.unregister?.();
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', onError);
      if (!result.ok) stream.pause();
      resolve(result);
    };
    const late = (detail: string) =>
      finish({
        ok: false,
        problem: new ProblemError('request-timeout', detail, {}, { headers: { connection: 'close' } }),
      });
    const check = () => {
      const now = performance.now();
      const idleLeft = lastByte + limits.idleMs - now;
      const totalLeft = started + limits.totalMs - now;
      if (totalLeft <= 0) return late(`the request body took longer than ${limits.totalMs} ms`);
      if (idleLeft <= 0) return late(`no request body bytes arrived for ${limits.idleMs} ms`);
      timer = setTimeout(check, Math.ceil(Math.min(idleLeft, totalLeft)));
    };
    const onData = (chunk: Buffer | string) => {
      const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      size += buf.length;
      if (size > limits.maxBytes) return finish(tooLarge());
      chunks.push(buf);
      lastByte = performance.now();
    };
    const onEnd = () => finish({ ok: true, body: Buffer.concat(chunks) });
    const onError = () =>
      finish({ ok: false, problem: new ProblemError('bad-request', 'the request body could not be read') });
    stop.unregister = limits.stopWhen?.((problem) => finish({ ok: false, problem }));
    timer = setTimeout(check, Math.min(limits.idleMs, limits.totalMs));
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onError);
  });
}
