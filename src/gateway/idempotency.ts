/**
 * Idempotency keys at the gateway (the IETF httpapi `Idempotency-Key` draft;
 * docs/gateway.md, "Idempotency"). On a route that declares `idempotency`, a request
 * with an unsafe method that carries the key's header:
 *
 * 1. its body is read whole (at most KEPT_BODY_LIMIT) and its fingerprint taken: method,
 *    target (path and query as sent), the fencing credential (Fencing-Token and
 *    Fencing-Sequencer as sent), the headers the route's lock is derived from, and a
 *    digest of the body;
 * 2. the store begins the record `<route>\n<key>` (Store.beginIdempotent), across
 *    gateway processes: done → the kept answer is replayed (the upstream and the fence
 *    are not asked); in flight → 409 idempotency-in-flight with Retry-After; another
 *    fingerprint → 422 idempotency-mismatch; begun → the request goes on through the
 *    fence and the forward as any other, and its answer is kept (./kept-answer.ts).
 *
 * The fence: a replay needs the very credential the first request was admitted with (it
 * is in the fingerprint), forwards nothing and returns what that admitted write got, so
 * it is not asked to admit the token again: refusing it as stale would tell the client
 * that a write which was applied was not. A stale token with a fresh key is a new request
 * and is refused by the fence as ever; its record is abandoned.
 */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { ProblemError } from '../errors.js';
import { readBoundedBody } from '../http/body.js';
import { sendContinue } from '../http/continue.js';
import type { Metrics } from '../observe/metrics.js';
import { idempotentMethod, type CompiledRoute, type IdempotencySettings } from '../policy/index.js';
import type { Store } from '../store/types.js';
import type { GatewayRequestState } from './context.js';
import type { Exchange } from './exchange.js';
import { FENCING_SEQUENCER, FENCING_TOKEN } from './headers.js';
import { AnswerKeeper, decodeAnswer, KEPT_BODY_LIMIT, replayAnswer } from './kept-answer.js';
import type { IdempotencyOutcome } from './reasons.js';

/** Longest key accepted, in characters (printable ASCII). */
export const MAX_KEY_LENGTH = 255;

/**
 * How long a begun request holds its key beyond the route's own bounds (the drain
 * barrier's wait and the upstream's answer time): store calls, the answer's body.
 */
export const HOLD_SLACK_MS = 30_000;

/**
 * The key in the header's value: an sf-string (`"…"`, as the draft writes it) or a bare
 * value, 1-255 printable ASCII characters. Null: malformed.
 */
export function parseKey(value: string | string[] | undefined): string | null {
  if (typeof value !== 'string') return null;
  const raw = value.trim();
  let key = raw;
  if (raw.startsWith('"')) {
    const m = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/.exec(raw);
    if (m === null) return null;
    key = (m[1] as string).replace(/\\(["\\])/g, '$1');
  } else if (!/^[\x21\x23-\x7e]+$/.test(raw)) {
    return null;
  }
  return key.length >= 1 && key.length <= MAX_KEY_LENGTH ? key : null;
}

function headerText(value: string | string[] | undefined): string {
  return value === undefined ? '' : Array.isArray(value) ? value.join('\n') : value;
}

/** The request's fingerprint: what a retry must repeat to be the same request. */
export function fingerprint(ex: Exchange, route: CompiledRoute, body: Buffer): string {
  const h = createHash('sha256');
  const part = (text: string) => h.update(`${text.length}:${text}`);
  part(ex.method);
  part(ex.req.url ?? '/');
  part(headerText(ex.headers[FENCING_TOKEN]));
  part(headerText(ex.headers[FENCING_SEQUENCER]));
  for (const p of route.lock?.parts ?? []) if (p.kind === 'header') part(headerText(ex.headers[p.name]));
  h.update(createHash('sha256').update(body).digest());
  return h.digest('base64url');
}

export class Idempotency {
  constructor(
    private readonly store: Store,
    private readonly metrics: Metrics,
  ) {}

  /** The route's settings when this request is one the route keeps answers for, else null. */
  applies(ex: Exchange, route: CompiledRoute): IdempotencySettings | null {
    const settings = route.idempotency;
    if (settings === null || !idempotentMethod(ex.method)) return null;
    return ex.headers[settings.header] === undefined ? null : settings;
  }

  /**
   * Serves a request `applies` chose: answered here (a replay or a refusal), or, begun,
   * handed to `next` (the fence and the forward) with its answer's keeper on `ex.tap`.
   */
  async serve(
    ex: Exchange,
    state: GatewayRequestState,
    settings: IdempotencySettings,
    next: () => void | Promise<void>,
  ): Promise<void> {
    const route = state.match.route;
    const key = parseKey(ex.headers[settings.header]);
    if (key === null) {
      const detail = `the ${settings.header} header must carry one key of 1-${MAX_KEY_LENGTH} printable characters`;
      throw new ProblemError('bad-request', detail);
    }
    const body = await this.readBody(ex, route);
    if (body === null) return;
    const record = `${route.name}\n${key}`;
    const attempt = ex.id;
    const begun = await this.store.beginIdempotent({
      key: record,
      fingerprint: fingerprint(ex, route, body),
      attempt,
      holdMs: holdMs(route),
    });
    this.count(route, begun.state === 'done' ? 'replayed' : begun.state);
    if (begun.state === 'done') return replayAnswer(ex, decodeAnswer(begun.response));
    if (begun.state === 'in-flight') throw inFlight(settings, begun.retryAfterMs);
    if (begun.state === 'mismatch') throw mismatch(settings);
    const keeper = new AnswerKeeper(
      {
        keep: (answer) =>
          this.store
            .finishIdempotent({ key: record, attempt, response: answer, ttlMs: settings.ttlMs })
            .then((kept) => (this.count(route, kept ? 'stored' : 'abandoned'), kept)),
        abandon: () =>
          this.store.abandonIdempotent(record, attempt).then(() => this.count(route, 'abandoned')),
      },
      ex.log,
    );
    ex.tap = keeper;
    ex.res.once('close', () => keeper.responseClosed());
    return next();
  }

  /** The body, read whole and bounded, and set to be forwarded; null when refused (answered). */
  private async readBody(ex: Exchange, route: CompiledRoute): Promise<Buffer | null> {
    if (ex.body === null) return Buffer.alloc(0);
    sendContinue(ex.req, ex.res);
    const read = await readBoundedBody(ex.req, ex.headers['content-length'], {
      maxBytes: KEPT_BODY_LIMIT,
      idleMs: route.upload.idleTimeoutMs,
      totalMs: route.upload.timeoutMs,
      what: 'the body of a request with an idempotency key',
    });
    if (!read.ok) {
      if (!ex.req.complete) ex.header('connection', 'close');
      ex.answerProblem(read.problem);
      return null;
    }
    ex.body = Readable.from([read.body]);
    return read.body;
  }

  private count(route: CompiledRoute, outcome: IdempotencyOutcome): void {
    this.metrics.idempotency.inc({ route: route.name, outcome });
  }
}

/** How long a begun request holds its key: the drain barrier's wait, the upstream's answer time, and slack. */
function holdMs(route: CompiledRoute): number {
  return (route.fencing?.drainTimeoutMs ?? 0) + route.upstream.timeoutMs + HOLD_SLACK_MS;
}

function inFlight(settings: IdempotencySettings, retryAfterMs: number): ProblemError {
  return new ProblemError(
    'idempotency-in-flight',
    `a request with this ${settings.header} is still being served; retry after it was answered`,
    { retryAfterMs },
    { headers: { 'retry-after': String(Math.max(1, Math.ceil(retryAfterMs / 1000))) } },
  );
}

function mismatch(settings: IdempotencySettings): ProblemError {
  return new ProblemError(
    'idempotency-mismatch',
    `this ${settings.header} was used for another request (method, target, fencing token, lock headers or body ` +
      'differ): use a new key for a new request',
  );
}
