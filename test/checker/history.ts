/**
 * The history checker: given what the upstream applied, what the issuer granted
 * and what the clients saw, finds the first way the run broke the fencing
 * contract. In the spirit of Jepsen's checkers, but specific to fencing: the
 * upstream's apply order is the ground truth. See docs/checker.md.
 *
 * Order of the search, and so which violation is "first":
 *   1. malformed input (applied seq, operations), then the issuer's record
 *      (malformed grants, duplicate-grant, grant-regression), in record order;
 *   2. the upstream's record in apply order; at one write: ungranted-token, then
 *      stale-owner / token-regression, then refused-applied / phantom-write;
 *   3. lost-ack, in client-record order.
 */
import { formatToken, parseToken } from '../../src/tokens.js';
import { Accounting, type Group } from './accounting.js';
import { appliedEvent, clientEvent, grantEvent, violation } from './events.js';
import { indexGrants, type GrantIndex } from './grants.js';
import {
  DEFAULT_REFUSED_STATUSES,
  type CheckOptions,
  type CheckResult,
  type CheckStats,
  type History,
  type HistoryEvent,
  type Violation,
} from './types.js';

interface Settings {
  refused: ReadonlySet<number>;
  size: number;
  complete: boolean;
}

export function checkHistory(history: History, options: CheckOptions = {}): CheckResult {
  const settings: Settings = {
    refused: new Set(options.refusedStatuses ?? DEFAULT_REFUSED_STATUSES),
    size: Math.max(0, options.contextSize ?? 3),
    complete: options.clientRecordComplete ?? false,
  };
  const accounting = new Accounting(history, settings.refused);
  const stats = (): CheckStats => ({
    locks: new Set([...history.applied, ...history.grants, ...history.operations].map((r) => r.lock)).size,
    grants: history.grants.length,
    applied: history.applied.length,
    operations: history.operations.length,
    ...accounting.counts,
    joinedByRequestId: accounting.joinedByRequestId,
  });
  const fail = (v: Violation): CheckResult => ({ ok: false, violation: v, stats: stats() });

  const malformed = checkInput(history, settings);
  if (malformed !== null) return fail(malformed);
  const granted = indexGrants(history, settings.size);
  if (!granted.ok) return fail(granted.violation);
  const applied = checkApplied(history, granted.grants, accounting, settings);
  if (applied !== null) return fail(applied);

  const lost = accounting.firstLostAck();
  if (lost !== null) {
    const op = history.operations[lost.index];
    if (op !== undefined) {
      const how = lost.group.byRequestId
        ? `request ${op.requestId}`
        : `token ${op.token ?? 'none'} from ${op.writer}`;
      const message =
        `${op.writer}'s write (req ${op.requestId}, token ${op.token ?? 'none'}) was acknowledged with ` +
        `${op.status} but the upstream never applied it: ${lost.group.acknowledged.length} acknowledged, ` +
        `${lost.group.applied} applied for ${how}`;
      return fail(
        violation(history, settings.size, 'lost-ack', op.lock, message, clientEvent(history, lost.index)),
      );
    }
  }
  return { ok: true, stats: stats() };
}

function checkInput(history: History, s: Settings): Violation | null {
  let lastSeq = -Infinity;
  for (const [index, a] of history.applied.entries()) {
    const problem = !Number.isSafeInteger(a.seq)
      ? `seq ${String(a.seq)} is not an integer`
      : a.seq <= lastSeq
        ? `seq ${a.seq} does not increase (previous ${lastSeq}): the record must be in apply order`
        : a.lock.length === 0
          ? 'the lock is empty'
          : null;
    if (problem !== null) {
      const msg = `applied #${index}: ${problem}`;
      return violation(history, s.size, 'malformed-input', a.lock, msg, appliedEvent(history, index));
    }
    lastSeq = a.seq;
  }
  for (const [index, op] of history.operations.entries()) {
    const is2xx = typeof op.status === 'number' && op.status >= 200 && op.status <= 299;
    if (op.acknowledged !== is2xx) {
      const msg = `client #${index}: acknowledged is ${op.acknowledged} but the status is ${op.status}`;
      return violation(history, s.size, 'malformed-input', op.lock, msg, clientEvent(history, index));
    }
  }
  return null;
}

/** An applied write, as the order checks remember it. */
interface Mark {
  token: bigint;
  writer: string;
  index: number;
}

/**
 * Per lock: `first`, the applied write with the highest token so far (its first
 * occurrence), and `other`, the highest among writers other than first's. Enough to
 * tell, for a new write (t, w), whether a higher token from another owner (a later
 * owner) was applied before it, and whether a higher token was applied at all.
 */
interface Tops {
  first: Mark;
  other: Mark | null;
}

function raise(tops: Tops | undefined, m: Mark): Tops {
  if (tops === undefined) return { first: m, other: null };
  const { first, other } = tops;
  if (m.writer === first.writer) return m.token > first.token ? { first: m, other } : tops;
  if (m.token > first.token) return { first: m, other: first };
  return other === null || m.token > other.token ? { first, other: m } : tops;
}

/** The applied write from another owner with a higher token than `m`'s, if any. */
function laterOwner(tops: Tops, m: Mark): Mark | null {
  if (m.writer !== tops.first.writer) return m.token < tops.first.token ? tops.first : null;
  return tops.other !== null && m.token < tops.other.token ? tops.other : null;
}

function checkApplied(
  history: History,
  grants: GrantIndex,
  accounting: Accounting,
  s: Settings,
): Violation | null {
  const tops = new Map<string, Tops>();
  for (const [index, a] of history.applied.entries()) {
    const here = appliedEvent(history, index);
    const fail = (kind: Violation['kind'], message: string, related: HistoryEvent | null) =>
      violation(history, s.size, kind, a.lock, message, here, related);
    const lockName = JSON.stringify(a.lock);

    const parsed = parseToken(a.token);
    if (!parsed.ok) {
      return fail(
        'ungranted-token',
        `seq ${a.seq} was applied with token ${JSON.stringify(a.token)}: ${parsed.reason}`,
        null,
      );
    }
    const token = parsed.token;
    const grant = grants.get(a.lock, token);
    if (grant === undefined) {
      return fail(
        'ungranted-token',
        `seq ${a.seq} was applied with token ${token}, never granted for lock ${lockName}`,
        null,
      );
    }
    if (a.writer !== undefined && a.writer !== grant.owner) {
      return fail(
        'ungranted-token',
        `seq ${a.seq} from ${a.writer} was applied with token ${token} of lock ${lockName}, granted to ${grant.owner}`,
        grantEvent(history, grant.index),
      );
    }
    const writer = grant.owner;

    const mark: Mark = { token, writer, index };
    const seen = tops.get(a.lock);
    const later = seen === undefined ? null : laterOwner(seen, mark);
    if (later !== null) {
      return fail(
        'stale-owner',
        `seq ${a.seq} from ${writer} (token ${token}) was applied after seq ${history.applied[later.index]?.seq} ` +
          `from ${later.writer} (token ${later.token}), a later owner of lock ${lockName}: ` +
          `a stale owner's write reached the upstream`,
        appliedEvent(history, later.index),
      );
    }
    if (seen !== undefined && token < seen.first.token) {
      return fail(
        'token-regression',
        `seq ${a.seq} from ${writer} with token ${token} was applied after seq ` +
          `${history.applied[seen.first.index]?.seq} with token ${seen.first.token}: ` +
          `applied tokens of lock ${lockName} went down`,
        appliedEvent(history, seen.first.index),
      );
    }
    tops.set(a.lock, raise(seen, mark));

    const excess = accounting.apply(a, formatToken(token), writer);
    if (excess !== null) {
      const v = excessViolation(history, a.seq, excess, s, fail);
      if (v !== null) return v;
    }
  }
  return null;
}

function excessViolation(
  history: History,
  seq: number,
  group: Group,
  s: Settings,
  fail: (kind: Violation['kind'], message: string, related: HistoryEvent | null) => Violation,
): Violation | null {
  const refusedIndex = group.refused[0];
  const counts = `${group.applied} applied, ${group.acknowledged.length} acknowledged, ${group.indeterminate} indeterminate`;
  if (refusedIndex !== undefined) {
    const op = history.operations[refusedIndex];
    const status = op === undefined ? '?' : String(op.status);
    return fail(
      'refused-applied',
      `seq ${seq} was applied, but the gateway refused the write with ${status} (${counts}, ` +
        `${group.refused.length} refused${group.byRequestId ? ', matched by requestId' : ''})`,
      clientEvent(history, refusedIndex),
    );
  }
  if (!s.complete) return null;
  return fail(
    'phantom-write',
    `seq ${seq} was applied, but no client operation accounts for it (${counts})`,
    null,
  );
}
