/**
 * What bounds one forwarded request, and what stops it from reaching the upstream once
 * it must not (docs/adr/0005-gateway-sessions.md):
 *
 * - A fenced write is sent only while its gateway session is valid: checked right
 *   before undici writes the request line (an interceptor's onRequestStart, which runs
 *   synchronously before the socket write, also for a request that waited in the pool
 *   queue) and before every body chunk (LeaseCheckedBody); when the session lapses
 *   while the request streams, the upstream request is aborted.
 * - The client's body must make progress: no byte for the route's
 *   `upload.idleTimeoutMs`, or longer than `upload.timeoutMs` in all, and the request is
 *   cut: 408 to the client, the upstream request aborted (or never sent).
 * - The upstream must answer: final response headers within the upstream's `timeoutMs`
 *   of the request being sent (after the upload); 1xx interim responses do not extend it.
 *   undici's own headers timeout does this until an interim response restarts it, so the
 *   guard's timer is armed only then (a timer per request cost measurable throughput).
 *
 * A request cut before undici started writing it is settled at once (its in-flight
 * entry finished): onRequestStart refuses it if undici ever dequeues it.
 */
import type { IncomingMessage } from 'node:http';
import { Transform, type TransformCallback } from 'node:stream';
import { ProblemError } from '../errors.js';
import type { Metrics } from '../observe/metrics.js';
import type { CutReason } from './reasons.js';
import { sessionLapsed, type SessionLease } from './session.js';

export type { CutReason } from './reasons.js';

/** The error undici sees for a request the gateway cut; carries the problem to send. */
export class ForwardCutError extends Error {
  /** A late upstream counts against its circuit breaker (a timeout code); other cuts do not. */
  readonly code: string;
  constructor(
    readonly problem: ProblemError,
    readonly reason: CutReason,
  ) {
    super(problem.message);
    this.name = 'ForwardCutError';
    this.code = reason === 'upstream-late' ? 'FG_UPSTREAM_LATE' : 'FG_FORWARD_CUT';
  }
}

export interface GuardSettings {
  upstream: string;
  /** Final response headers within this many ms of the request being sent (uploads excluded). */
  timeoutMs: number;
  idleTimeoutMs: number;
  uploadTimeoutMs: number;
  /** Set for enforced fenced writes: nothing is sent under it once it is no longer valid. */
  lease: SessionLease | null;
  lock: string | null;
}

type Abort = (err?: Error) => void;

export class ForwardGuard {
  private abort: Abort | null = null;
  private cut: ForwardCutError | null = null;
  private answered = false;
  private bodyDone: boolean;
  private headersTimer: NodeJS.Timeout | null = null;
  /** performance.now() when the whole request was handed to undici (-1: not yet). */
  private sentAt = -1;
  private uploadTimer: NodeJS.Timeout | null = null;
  private untrack: (() => void) | null = null;
  private finished = false;
  private idleArmed = false;

  constructor(
    private readonly settings: GuardSettings,
    private readonly raw: IncomingMessage,
    private readonly metrics: Metrics,
    /** Called when the request is cut before undici started sending it (it never will). */
    private readonly onCutUnsent: (err: ForwardCutError) => void,
  ) {
    this.bodyDone = !hasPendingBody(raw);
    if (!this.bodyDone) this.watchUpload();
    const lease = settings.lease;
    if (lease !== null) this.untrack = lease.track(() => this.cutFor('session-lapsed'));
  }

  /** The error to fail the request with if it must not be sent now, else null. */
  refusal(): ForwardCutError | null {
    if (this.cut !== null) return this.cut;
    const lease = this.settings.lease;
    if (lease !== null && !lease.valid) return this.cutFor('session-lapsed');
    return null;
  }

  /** undici is about to write the request (onRequestStart). */
  started(abort: Abort): ForwardCutError | null {
    const refusal = this.refusal();
    if (refusal !== null) return refusal;
    this.abort = abort;
    if (this.bodyDone) this.sentAt = performance.now();
    return null;
  }

  /** An interim (1xx) response arrived: the final one is still due at sentAt + timeoutMs. */
  interim(): void {
    if (this.headersTimer !== null || this.answered || this.finished) return;
    const elapsed = this.sentAt < 0 ? 0 : performance.now() - this.sentAt;
    const left = Math.max(0, this.settings.timeoutMs - elapsed);
    this.headersTimer = setTimeout(() => this.cutFor('upstream-late'), left);
  }

  /** The final response cannot be passed on unchanged (foreignTransferCoding): 502, upstream request aborted. */
  unforwardableAnswer(): ForwardCutError {
    this.answered = true; // the upstream answered: it is done with the request
    return this.cutFor('upstream-encoding');
  }

  /**
   * When the request settled without a final answer after it was handed to undici whole
   * (so the upstream may have it, and may still apply it): performance.now() at that
   * hand-over; else null (answered, or never sent whole).
   */
  unansweredSince(): number | null {
    return this.sentAt >= 0 && !this.answered ? this.sentAt : null;
  }

  /** Response headers arrived (statusCode ≥ 200; interim 1xx responses do not count). */
  responded(): void {
    this.answered = true;
    this.clearHeadersTimer();
  }

  /** The request settled (answered, failed, cut): timers and session tracking end. */
  settled(): void {
    if (this.finished) return;
    this.finished = true;
    this.clearHeadersTimer();
    this.clearUpload();
    this.untrack?.();
    this.untrack = null;
  }

  /**
   * Wraps a body that is still arriving so that no chunk is passed on once the session
   * is invalid. A body already received whole leaves in the same turn as the request
   * line, right after the onConnect check: a per-chunk check would add a stream per
   * request (measured: ~10 % of fenced throughput) for nothing. The fence reads a small
   * fenced body whole before forwarding (admission.ts, SMALL_BODY_BYTES), so only larger or
   * chunked uploads come here.
   */
  guardBody<B>(body: B): B | LeaseCheckedBody {
    const lease = this.settings.lease;
    if (lease === null || this.bodyDone || !isStream(body)) return body;
    const checked = new LeaseCheckedBody(lease, () => this.cutFor('session-lapsed'));
    body.on('error', (err: Error) => checked.destroy(err));
    return body.pipe(checked);
  }

  /** Listeners of a body still arriving (made only then: most bodies arrived whole). */
  private onIdle: (() => void) | null = null;
  private onBodyEnd: (() => void) | null = null;

  private watchUpload(): void {
    const { idleTimeoutMs, uploadTimeoutMs } = this.settings;
    this.onIdle = () => {
      if (!this.bodyDone) this.cutFor('body-idle');
    };
    this.onBodyEnd = () => {
      this.bodyDone = true;
      this.clearUpload();
      if (this.abort !== null) this.sentAt = performance.now();
    };
    this.raw.socket.setTimeout(idleTimeoutMs);
    this.idleArmed = true;
    this.raw.on('timeout', this.onIdle);
    this.uploadTimer = setTimeout(() => this.cutFor('upload-time'), uploadTimeoutMs);
    this.raw.once('end', this.onBodyEnd);
  }

  /** The client connection closed: its body can no longer make progress, so stop timing it. */
  clientClosed(): void {
    this.clearUpload();
  }

  private clearUpload(): void {
    if (this.uploadTimer !== null) clearTimeout(this.uploadTimer);
    this.uploadTimer = null;
    if (!this.idleArmed) return;
    this.idleArmed = false;
    if (this.onIdle !== null) this.raw.off('timeout', this.onIdle);
    if (this.onBodyEnd !== null) this.raw.off('end', this.onBodyEnd);
    // undici drops the socket of a request body it finished sending (its util.destroy).
    const socket = this.raw.socket as typeof this.raw.socket | null;
    if (socket !== null && !socket.destroyed) socket.setTimeout(0);
  }

  private clearHeadersTimer(): void {
    if (this.headersTimer !== null) clearTimeout(this.headersTimer);
    this.headersTimer = null;
  }

  private cutFor(reason: CutReason): ForwardCutError {
    if (this.cut !== null) return this.cut;
    if (this.finished) return new ForwardCutError(problemFor(reason, this.settings), reason);
    // A late answer that already arrived is not cut for lateness.
    if (reason === 'upstream-late' && this.answered)
      return new ForwardCutError(problemFor(reason, this.settings), reason);
    // The upstream may have the whole request only if undici started it and the body was complete.
    const whole = this.abort !== null && this.bodyDone;
    const err = new ForwardCutError(problemFor(reason, this.settings, whole), reason);
    this.cut = err;
    this.metrics.forwardsCut.inc({ reason });
    if (this.abort !== null) {
      this.abort(err);
    } else {
      this.settled();
      this.onCutUnsent(err);
    }
    return err;
  }
}

/** `sent`: the upstream may have received the whole request (so it may apply it). */
function problemFor(reason: CutReason, s: GuardSettings, sent = false): ProblemError {
  switch (reason) {
    case 'body-idle':
      return new ProblemError(
        'request-timeout',
        `no request body bytes arrived for ${s.idleTimeoutMs} ms; the upstream request was aborted`,
        {},
        { headers: { connection: 'close' } },
      );
    case 'upload-time':
      return new ProblemError(
        'request-timeout',
        `the request body took longer than ${s.uploadTimeoutMs} ms; the upstream request was aborted`,
        {},
        { headers: { connection: 'close' } },
      );
    case 'upstream-late':
      return new ProblemError(
        'upstream-timeout',
        `upstream "${s.upstream}" did not answer within ${s.timeoutMs} ms; it may still apply the request`,
        { upstream: s.upstream },
      );
    case 'session-lapsed':
      return sessionLapsed(s.lock, sent);
    case 'upstream-encoding':
      return new ProblemError(
        'upstream-unavailable',
        `upstream "${s.upstream}" answered with a transfer-coding other than chunked (such as gzip), ` +
          'which the gateway cannot pass on unchanged; it may have applied the request',
        { upstream: s.upstream },
      );
  }
}

/**
 * True when a response's Transfer-Encoding names a coding besides `chunked` (`gzip`,
 * `chunked, gzip`): the gateway would pass on the body undecoded under a plain chunked
 * framing, silently changing what the client receives.
 */
export function foreignTransferCoding(rawHeaders: readonly Buffer[]): boolean {
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i];
    if (
      name === undefined ||
      name.length !== 17 ||
      name.toString('latin1').toLowerCase() !== 'transfer-encoding'
    )
      continue;
    for (const coding of (rawHeaders[i + 1]?.toString('latin1') ?? '').split(',')) {
      const c = coding.trim().toLowerCase();
      if (c !== '' && c !== 'chunked') return true;
    }
  }
  return false;
}

/** True when the client is still sending a body (declared and not yet fully received). */
function hasPendingBody(raw: IncomingMessage): boolean {
  if (raw.complete) return false;
  const length = raw.headers['content-length'];
  if (length !== undefined) return length !== '0';
  return raw.headers['transfer-encoding'] !== undefined;
}

function isStream(body: unknown): body is NodeJS.ReadableStream {
  return body !== null && typeof body === 'object' && typeof (body as { pipe?: unknown }).pipe === 'function';
}

/** Passes body chunks on only while the lease is valid; fails the body otherwise. */
export class LeaseCheckedBody extends Transform {
  constructor(
    private readonly lease: SessionLease,
    private readonly onLapsed: () => Error,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, callback: TransformCallback): void {
    if (this.lease.valid) callback(null, chunk);
    else callback(this.onLapsed());
  }
}

/** undici's legacy handler interface, as its Request calls it (see GuardedHandler). */
export interface LegacyHandler {
  onConnect?(abort: (err?: Error) => void, context?: unknown): void;
  onResponseStarted?(): void;
  onHeaders?(
    statusCode: number,
    rawHeaders: Buffer[],
    resume: () => void,
    statusText: string,
  ): boolean | void;
  onData?(chunk: Buffer): boolean | void;
  onComplete?(trailers: Buffer[] | null): void;
  onError?(err: Error): void;
  onUpgrade?(statusCode: number, rawHeaders: Buffer[], socket: unknown): void;
  onBodySent?(chunk: unknown): void;
  onRequestSent?(): void;
}

/**
 * Wraps undici's own request handler: the guard may refuse the request in onConnect,
 * which undici calls synchronously right before writing it to the socket (also for a
 * request that waited in the pool's queue), and sees the final response headers.
 * (A legacy-interface wrapper, not an interceptor: undici would otherwise convert every
 * handler between its two interfaces and parse the response headers twice.)
 */
export class GuardedHandler implements LegacyHandler {
  constructor(
    private readonly guard: ForwardGuard,
    private readonly inner: LegacyHandler,
  ) {}

  onConnect(abort: (err?: Error) => void, context?: unknown): void {
    const refusal = this.guard.started(abort);
    if (refusal !== null) {
      abort(refusal);
      return;
    }
    this.inner.onConnect?.(abort, context);
  }

  onResponseStarted(): void {
    this.inner.onResponseStarted?.();
  }

  onHeaders(
    statusCode: number,
    rawHeaders: Buffer[],
    resume: () => void,
    statusText: string,
  ): boolean | void {
    if (statusCode >= 200) {
      if (foreignTransferCoding(rawHeaders)) {
        this.guard.unforwardableAnswer();
        return false;
      }
      this.guard.responded();
    } else this.guard.interim();
    return this.inner.onHeaders?.(statusCode, rawHeaders, resume, statusText);
  }

  onData(chunk: Buffer): boolean | void {
    return this.inner.onData?.(chunk);
  }

  onComplete(trailers: Buffer[] | null): void {
    this.inner.onComplete?.(trailers);
  }

  onError(err: Error): void {
    this.inner.onError?.(err);
  }

  onUpgrade(statusCode: number, rawHeaders: Buffer[], socket: unknown): void {
    this.inner.onUpgrade?.(statusCode, rawHeaders, socket);
  }

  onBodySent(chunk: unknown): void {
    this.inner.onBodySent?.(chunk);
  }

  onRequestSent(): void {
    this.inner.onRequestSent?.();
  }
}
