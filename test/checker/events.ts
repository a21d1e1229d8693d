/**
 * Violations and how they read: the events around the offending one (same lock,
 * same record), one line per event, and formatViolation() for test output.
 */
import type { CheckResult, ContextEntry, History, HistoryEvent, Violation, ViolationKind } from './types.js';

export function appliedEvent(history: History, index: number): HistoryEvent {
  return { source: 'applied', index, record: at(history.applied, index) };
}

export function grantEvent(history: History, index: number): HistoryEvent {
  return { source: 'grant', index, record: at(history.grants, index) };
}

export function clientEvent(history: History, index: number): HistoryEvent {
  return { source: 'client', index, record: at(history.operations, index) };
}

function at<T>(list: readonly T[], index: number): T {
  const item = list[index];
  if (item === undefined) throw new RangeError(`no event at index ${index}`);
  return item;
}

/** Every event of `source` for `lock`, in record order. */
function eventsOf(history: History, source: HistoryEvent['source'], lock: string): HistoryEvent[] {
  const out: HistoryEvent[] = [];
  const add = (index: number) => {
    if (source === 'applied') out.push(appliedEvent(history, index));
    else if (source === 'grant') out.push(grantEvent(history, index));
    else out.push(clientEvent(history, index));
  };
  const list: readonly { lock: string }[] =
    source === 'applied' ? history.applied : source === 'grant' ? history.grants : history.operations;
  list.forEach((r, i) => {
    if (r.lock === lock) add(i);
  });
  return out;
}

/**
 * Builds a violation: `size` events of the same lock and record either side of
 * `offending`, plus `related` (the event it conflicts with) wherever it lies.
 */
export function violation(
  history: History,
  size: number,
  kind: ViolationKind,
  lock: string,
  message: string,
  offending: HistoryEvent,
  related: HistoryEvent | null = null,
): Violation {
  const same = eventsOf(history, offending.source, lock);
  const pos = same.findIndex((e) => e.index === offending.index);
  const window = pos < 0 ? [offending] : same.slice(Math.max(0, pos - size), pos + size + 1);
  const context: ContextEntry[] = window.map((event) => ({
    mark: event.index === offending.index ? 'violation' : isSame(event, related) ? 'related' : null,
    event,
  }));
  if (related !== null && !context.some((c) => isSame(c.event, related))) {
    const entry: ContextEntry = { mark: 'related', event: related };
    const before = related.source === offending.source && related.index < offending.index;
    if (before) context.unshift(entry);
    else context.push(entry);
  }
  return { kind, lock, message, context };
}

function isSame(a: HistoryEvent, b: HistoryEvent | null): boolean {
  return b !== null && a.source === b.source && a.index === b.index;
}

/** One line per event, e.g. `applied #4 seq 5 token 42 writer w1 req r9`. */
export function describeEvent(event: HistoryEvent): string {
  switch (event.source) {
    case 'applied': {
      const r = event.record;
      const writer = r.writer === undefined ? '' : ` writer ${r.writer}`;
      const req = r.requestId === undefined || r.requestId === null ? '' : ` req ${r.requestId}`;
      return `applied #${event.index} seq ${r.seq} lock ${JSON.stringify(r.lock)} token ${show(r.token)}${writer}${req}`;
    }
    case 'grant': {
      const r = event.record;
      const when = r.grantedAt === undefined ? '' : ` at ${r.grantedAt}`;
      return `grant #${event.index} lock ${JSON.stringify(r.lock)} token ${show(r.token)} to ${r.owner} lease ${r.leaseId}${when}`;
    }
    case 'client': {
      const r = event.record;
      const token = r.token === null ? 'none' : show(r.token);
      const ack = r.acknowledged ? ' (acknowledged)' : '';
      return `client #${event.index} ${r.writer} lock ${JSON.stringify(r.lock)} token ${token} req ${r.requestId} → ${r.status}${ack}`;
    }
  }
}

function show(token: string): string {
  return /^[0-9]+$/.test(token) ? token : JSON.stringify(token);
}

/** A violation (or a result) as text for test failure messages. */
export function formatViolation(v: Violation | CheckResult): string {
  if ('ok' in v) {
    if (v.ok) return `history ok (${formatStats(v.stats)})`;
    return `${formatViolation(v.violation)}\n  stats: ${formatStats(v.stats)}`;
  }
  const lines = [`${v.kind} on lock ${JSON.stringify(v.lock)}: ${v.message}`];
  for (const entry of v.context) {
    const mark = entry.mark === 'violation' ? '>>' : entry.mark === 'related' ? ' *' : '  ';
    lines.push(`  ${mark} ${describeEvent(entry.event)}`);
  }
  return lines.join('\n');
}

function formatStats(s: CheckResult['stats']): string {
  return (
    `${s.locks} locks, ${s.grants} grants, ${s.applied} applied, ${s.operations} operations ` +
    `(${s.acknowledged} acknowledged, ${s.refused} refused, ${s.indeterminate} indeterminate), ` +
    `${s.joinedByRequestId} joined by requestId`
  );
}
