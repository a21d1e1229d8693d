/**
 * The fencing preHandler: runs on headers only (the body is still an unread stream),
 * decides, and either refuses (problem reply, not forwarded), or lets the request
 * through to the proxy — after the drain barrier when lower-token writes are still
 * in flight. In shadow mode (enforce: false) every refusal is counted and recorded
 * but the request goes through, and the store is not changed.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { ProblemError } from '../errors.js';
import type { EventLog } from '../observe/events.js';
import type { FencedReason, Metrics } from '../observe/metrics.js';
import type { FencingSettings } from '../policy/index.js';
import type { FencingToken } from '../tokens.js';
import type { GatewayRequestState } from './context.js';
import { awaitDrain, type DrainOutcome } from './drain.js';
import { InflightEntry } from './inflight.js';
import type { SessionObserver } from './observer.js';
import { sendProblem } from './problems.js';
import type { GatewaySessions, SessionLease } from './session.js';
import type { StoreGuard } from './store-guard.js';
import { decide, fenceUnavailable } from './verdict.js';

export interface FenceOptions {
  guard: StoreGuard;
  sessions: GatewaySessions;
  observer: SessionObserver;
  metrics: Metrics;
  events: EventLog;
}

interface Refusal {
  problem: ProblemError;
  reason: FencedReason;
  lock: string;
  token: FencingToken | null;
  highest: FencingToken | null;
}

async function fence(app: FastifyInstance, opts: FenceOptions): Promise<void> {
  const { guard, sessions, observer, metrics, events } = opts;

  function record(request: FastifyRequest, state: GatewayRequestState, r: Refusal, enforced: boolean): void {
    const route = state.match.route.name;
    metrics.fencedWrites.inc({ route, reason: r.reason, enforced: String(enforced) });
    events.record({
      time: new Date().toISOString(),
      route,
      lock: r.lock,
      token: r.token === null ? null : r.token.toString(10),
      highest: r.highest === null ? null : r.highest.toString(10),
      reason: r.reason,
      enforced,
      client: request.ip,
      owner: null,
      method: request.method,
      path: state.path,
    });
  }

  /** Waits at the drain barrier: null when cleared, else the 503 to answer with. */
  async function passBarrier(
    lease: SessionLease,
    lock: string,
    token: FencingToken,
    fencing: FencingSettings,
    signal: AbortSignal,
  ): Promise<ProblemError | null> {
    const started = performance.now();
    let outcome: DrainOutcome | ProblemError;
    try {
      outcome = await awaitDrain(guard, observer, lease, lock, token, fencing.drainTimeoutMs, signal);
    } catch (err) {
      outcome = fenceUnavailable(err, lock);
    }
    const label = outcome instanceof ProblemError ? 'error' : outcome;
    metrics.drainWaitSeconds.observe({ outcome: label }, (performance.now() - started) / 1000);
    if (outcome === 'cleared') return null;
    if (outcome instanceof ProblemError) return outcome;
    if (outcome === 'lapsed') return sessionLapsed(lock, token);
    const detail =
      outcome === 'aborted'
        ? 'the client went away at the drain barrier'
        : `lower-token writes for lock "${lock}" still in flight after ${fencing.drainTimeoutMs} ms`;
    return new ProblemError(
      'fence-unavailable',
      detail,
      { lock, token },
      { headers: { 'retry-after': '1' } },
    );
  }

  // Callback style: an unfenced request passes without a promise or a microtask. A
  // fenced one runs fenceRequest; when that sent a refusal, done() is not called.
  app.addHook('preHandler', (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
    const state = request.fencegate;
    const fencing = state?.match.route.fencing ?? null;
    if (state === null || fencing === null) {
      done();
      return;
    }
    fenceRequest(request, reply, state, fencing).then(
      (sent) => {
        if (sent === undefined) done();
      },
      (err: unknown) => done(err instanceof Error ? err : new Error(String(err))),
    );
  });

  async function fenceRequest(
    request: FastifyRequest,
    reply: FastifyReply,
    state: GatewayRequestState,
    fencing: FencingSettings,
  ): Promise<FastifyReply | undefined> {
    const { route, params } = state.match;

    // The AbortController is made only for a request that waits at the barrier: aborting
    // one builds a DOMException (with a stack), too costly to do on every response.
    let clientGone = false;
    let gone: AbortController | null = null;
    let entry: InflightEntry | null = null;
    reply.raw.once('close', () => {
      clientGone = true;
      gone?.abort();
      entry?.clientClosed();
    });

    // An enforced write is admitted under this process's gateway session; without a
    // valid one (the store has not answered a beat in time) nothing is admitted.
    const lease = fencing.enforce ? sessions.current() : null;
    const verdict = await decide({
      route: { ...route, fencing },
      params,
      raw: request.raw,
      requestId: request.id,
      session: lease?.id ?? '',
      guard,
      noSession: fencing.enforce && lease === null,
    });

    if (!verdict.ok) {
      record(request, state, verdict, fencing.enforce);
      if (fencing.enforce) return sendProblem(reply, verdict.problem);
      state.fence = { mode: 'shadow-refused', lock: verdict.lock, token: verdict.token, entry: null };
      return undefined;
    }
    const { lock, token } = verdict;
    if (!fencing.enforce) {
      metrics.admittedWrites.inc({ route: route.name });
      state.fence = { mode: 'shadow-admitted', lock, token, entry: null };
      return undefined;
    }

    if (lease === null) throw new Error('an enforced admission without a gateway session');
    entry = new InflightEntry(lease, () => void guard.finish(lock, request.id));
    if (clientGone) entry.clientClosed(); // finished: the proxy will not forward it
    if (!lease.valid && !entry.finished) {
      // The admission outlived this process's session: its entry may no longer count.
      entry.finish();
      const problem = sessionLapsed(lock, token);
      record(request, state, { ...verdict, problem, reason: 'unavailable' }, true);
      return sendProblem(reply, problem);
    }
    if (verdict.lowerInflight > 0 && !entry.finished) {
      gone = new AbortController();
      const barrier = await passBarrier(lease, lock, token, fencing, gone.signal);
      if (barrier !== null) {
        entry.finish();
        // A client that went away gets no event; the reply goes nowhere but must not reach the proxy.
        if (!clientGone) {
          record(request, state, { ...verdict, problem: barrier, reason: 'unavailable' }, true);
        }
        return sendProblem(reply, barrier);
      }
    }
    metrics.admittedWrites.inc({ route: route.name });
    state.fence = { mode: 'admitted', lock, token, entry };
    return undefined;
  }
}

/** 503 for a write whose gateway session stopped being valid before it could be forwarded. */
export function sessionLapsed(lock: string, token: FencingToken): ProblemError {
  return new ProblemError(
    'fence-unavailable',
    'this gateway lost its session with the fence store before the write could be forwarded',
    { lock, token },
    { headers: { 'retry-after': '1' } },
  );
}

export const fencePlugin = fp(fence, {
  name: 'fencegate-fence',
  fastify: '5.x',
  dependencies: ['fencegate-routing'],
});
