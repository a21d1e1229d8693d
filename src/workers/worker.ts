/**
 * A worker process of `fencegate serve --workers N`: a gateway on the shared data
 * listener, with its own store connection and its own gateway session (ADR 0005), as a
 * separate gateway process has. The primary (primary.ts) runs the issuer and the control
 * listener; the worker sends it its fenced-write events, answers its questions
 * (metrics, breakers, reload) and drains when told to, or on SIGTERM/SIGINT.
 */
import { BreakerBoard } from '../breakers/board.js';
import { EventLog, type EventInput, type FenceEvent } from '../observe/events.js';
import type { Logger } from '../observe/log.js';
import { formatPolicyError } from '../policy/index.js';
import {
  buildDataPlane,
  listenerAddress,
  openCore,
  reloadTls,
  runClosers,
  type ServeCore,
} from '../serve.js';
import { isToWorker, type Question, type ReloadAnswer, type ToPrimary, type WorkerRole } from './ipc.js';

/** Events waiting to be sent to the primary at most; past it they are dropped (a primary that stalls). */
const MAX_PENDING_EVENTS = 10_000;

function send(message: ToPrimary): Promise<void> {
  return new Promise((resolve) => {
    if (process.send === undefined || !process.connected) return resolve();
    process.send(message, undefined, {}, () => resolve());
  });
}

/**
 * Runs the worker until it has drained; resolves with its exit code. A worker that cannot
 * start tells the primary why (which fails the start, or retries a restart later).
 */
export async function runWorker(role: WorkerRole, logger: Logger): Promise<number> {
  const config = role.config;
  let core: ServeCore;
  try {
    core = await openCore(config, logger, { startupNotes: 'debug' });
  } catch (err) {
    await send({ fg: 'failed', message: err instanceof Error ? err.message : String(err) });
    return 1;
  }
  const forwarder = new EventForwarder(role.slot);
  // The primary keeps the event log the control listener serves; this one only numbers
  // the worker's events on their way there.
  const events = new EventLog({ capacity: 1 });
  events.subscribe((e) => forwarder.push(e));
  const breakers = new BreakerBoard();
  try {
    const gateway = await buildDataPlane(core, events, breakers);
    await gateway.listen({ host: config.listen.host, port: config.listen.port });
    await send({ fg: 'ready', data: listenerAddress(gateway, core.tls.data !== null) });
  } catch (err) {
    await runClosers(core.closers);
    await send({ fg: 'failed', message: err instanceof Error ? err.message : String(err) });
    return 1;
  }

  const answer = async (question: Question): Promise<unknown> => {
    switch (question) {
      case 'metrics':
        return core.metrics.registry.getMetricsAsJSON();
      case 'breakers':
        return breakers.snapshot();
      case 'reload': {
        const result = await core.policy.reload();
        const errors = result.ok ? [] : result.errors.map(formatPolicyError);
        // The primary checked this policy: a failure here means the files changed since.
        if (!result.ok)
          core.lifecycle.error(
            { reload: { outcome: 'failure', errors } },
            'policy reload failed in this worker, keeping its last good policy',
          );
        return { policy: result.ok, errors } satisfies ReloadAnswer;
      }
      case 'reload-keys':
        return (await core.sequencerKeys?.reload()) ?? true;
      case 'reload-tls':
        // The data listener's files and the upstream CA; the primary follows the control listener's.
        return reloadTls(core, 'SIGHUP', ['data listener', 'upstream CA']).ok;
    }
  };

  return new Promise<number>((resolve) => {
    let draining = false;
    const drain = () => {
      if (draining) return;
      draining = true;
      void runClosers(core.closers)
        .then(() => forwarder.flush())
        .then(() => resolve(0));
    };
    process.on('message', (m: unknown) => {
      if (!isToWorker(m)) return;
      if (m.fg === 'shutdown') drain();
      else if (m.fg === 'ask')
        void answer(m.question)
          .catch(() => undefined)
          .then((value) => send({ fg: 'answer', id: m.id, value }));
    });
    // A signal to the whole process group (Ctrl-C) reaches the workers too: drain as told.
    process.on('SIGTERM', drain);
    process.on('SIGINT', drain);
    // The primary reloads every worker on SIGHUP; one sent to the group must not end this one.
    process.on('SIGHUP', () => undefined);
  });
}

/** Sends the worker's events to the primary, batched per turn of the event loop. */
class EventForwarder {
  private pending: EventInput[] = [];
  private scheduled = false;

  constructor(private readonly slot: number) {}

  push(event: FenceEvent): void {
    if (this.pending.length >= MAX_PENDING_EVENTS) return;
    const { id: _id, ...input } = event;
    this.pending.push({ ...input, worker: this.slot });
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => void this.flush());
    }
  }

  async flush(): Promise<void> {
    this.scheduled = false;
    if (this.pending.length === 0) return;
    const events = this.pending;
    this.pending = [];
    await send({ fg: 'events', events });
  }
}
