/**
 * How a refused fenced write is counted and recorded, in one place for the gateway's
 * fence (fence.ts) and for kinds that judge the token inside the resource (the postgres
 * kind's stale-token): the fenced-writes metric and an event in the event log.
 */
import type { EventLog } from '../observe/events.js';
import type { Metrics } from '../observe/metrics.js';
import type { FencedReason } from './reasons.js';
import type { FencingToken } from '../tokens.js';
import type { GatewayRequestState } from './context.js';
import type { Exchange } from './exchange.js';

export interface RefusedWrite {
  reason: FencedReason;
  /** Lower-token writes did not leave the drain barrier in time (an ordering timeout). */
  drainTimeout?: boolean;
  /** Refused within the lock-delay after this gateway found the store reset (reset-hold.ts). */
  afterReset?: boolean;
  lock: string;
  token: FencingToken | string | null;
  highest: FencingToken | string | null;
}

export type RecordRefusal = (
  ex: Exchange,
  state: GatewayRequestState,
  refusal: RefusedWrite,
  enforced: boolean,
) => void;

const text = (t: FencingToken | string | null): string | null =>
  t === null ? null : typeof t === 'string' ? t : t.toString(10);

/** A refusal's tokens as the event shows them. */
interface Shown {
  token: string | null;
  highest: string | null;
}

/**
 * The tokens of each refusal value, rendered once: a stale flood answers the same refusal
 * (verdict.ts, StaleRefusals) to every write, and its events then share two strings
 * instead of each holding two new ones for as long as the event log keeps it.
 */
const shown = new WeakMap<RefusedWrite, Shown>();

function shownOf(r: RefusedWrite): Shown {
  let s = shown.get(r);
  if (s === undefined) {
    s = { token: text(r.token), highest: text(r.highest) };
    shown.set(r, s);
  }
  return s;
}

/** The current time in ISO form, made once per millisecond: a stale flood refuses many writes per ms. */
let isoMs = -1;
let iso = '';
function nowIso(): string {
  const ms = Date.now();
  if (ms !== isoMs) {
    isoMs = ms;
    iso = new Date(ms).toISOString();
  }
  return iso;
}

export function refusalRecorder(metrics: Metrics, events: EventLog): RecordRefusal {
  return (ex, state, r, enforced) => {
    const route = state.match.route.name;
    metrics.fenceOf(route).refused(r.reason, enforced).n += 1;
    const { token, highest } = shownOf(r);
    const [type, reason] =
      r.drainTimeout === true
        ? (['drain-timeout', 'drain-timeout'] as const)
        : r.afterReset === true
          ? (['lock-delay', 'store-reset'] as const)
          : (['fenced-write', r.reason] as const);
    events.record({
      time: nowIso(),
      type,
      reason,
      route,
      lock: r.lock,
      token,
      highest,
      enforced,
      client: ex.ip,
      owner: null,
      method: ex.method,
      path: state.path,
    });
  };
}
