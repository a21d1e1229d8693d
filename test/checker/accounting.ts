/**
 * Matching the client's record against the upstream's: (d) acknowledged writes
 * were applied, (f) refused writes were not.
 *
 * Each operation and each applied write falls into one group. When an applied
 * write's requestId equals an operation's (same lock), the group is that request
 * id; otherwise it is (lock, token, writer), and the counts of the group decide:
 *
 *   applied ≤ acknowledged + indeterminate     (more would be a refused or phantom write)
 *   acknowledged ≤ applied                     (fewer would be a lost acknowledged write)
 */
import { formatToken, parseToken } from '../../src/tokens.js';
import type { AppliedRecord, ClientOperation, History } from './types.js';

export type Outcome = 'acknowledged' | 'refused' | 'indeterminate';

export interface Group {
  /** Indexes of acknowledged operations, in client-record order. */
  acknowledged: number[];
  indeterminate: number;
  /** Indexes of refused operations, in client-record order. */
  refused: number[];
  /** Applied writes counted so far (while walking the upstream's record). */
  applied: number;
  byRequestId: boolean;
}

export function outcomeOf(op: ClientOperation, refusedStatuses: ReadonlySet<number>): Outcome {
  if (op.acknowledged) return 'acknowledged';
  if (typeof op.status === 'number' && refusedStatuses.has(op.status)) return 'refused';
  return 'indeterminate';
}

/** A token as a group key: canonical when it parses, otherwise the raw text, marked. */
function tokenKey(token: string | null): string {
  if (token === null) return '-';
  const parsed = parseToken(token);
  return parsed.ok ? formatToken(parsed.token) : `raw:${token}`;
}

const idKey = (lock: string, requestId: string) => `id\u0000${lock}\u0000${requestId}`;
const tupleKey = (lock: string, token: string, writer: string) =>
  `kt\u0000${lock}\u0000${token}\u0000${writer}`;

export class Accounting {
  private readonly groups = new Map<string, Group>();
  private readonly opIds = new Set<string>();
  private readonly appliedIds = new Set<string>();
  readonly counts = { acknowledged: 0, refused: 0, indeterminate: 0 };
  joinedByRequestId = 0;

  constructor(history: History, refusedStatuses: ReadonlySet<number>) {
    for (const op of history.operations) this.opIds.add(idKey(op.lock, op.requestId));
    for (const a of history.applied) {
      if (a.requestId !== undefined && a.requestId !== null) this.appliedIds.add(idKey(a.lock, a.requestId));
    }
    for (const a of history.applied) {
      if (a.requestId !== undefined && a.requestId !== null && this.opIds.has(idKey(a.lock, a.requestId))) {
        this.joinedByRequestId += 1;
      }
    }
    history.operations.forEach((op, index) => {
      const id = idKey(op.lock, op.requestId);
      const byRequestId = this.appliedIds.has(id);
      const group = this.group(
        byRequestId ? id : tupleKey(op.lock, tokenKey(op.token), op.writer),
        byRequestId,
      );
      const outcome = outcomeOf(op, refusedStatuses);
      this.counts[outcome] += 1;
      if (outcome === 'acknowledged') group.acknowledged.push(index);
      else if (outcome === 'refused') group.refused.push(index);
      else group.indeterminate += 1;
    });
  }

  private group(key: string, byRequestId: boolean): Group {
    let g = this.groups.get(key);
    if (g === undefined) {
      g = { acknowledged: [], indeterminate: 0, refused: [], applied: 0, byRequestId };
      this.groups.set(key, g);
    }
    return g;
  }

  /**
   * Counts one applied write (writer resolved, token canonical). Returns its group
   * when the group now holds more applied writes than operations that may have
   * been applied, else null.
   */
  apply(a: AppliedRecord, token: string, writer: string): Group | null {
    const id = a.requestId === undefined || a.requestId === null ? null : idKey(a.lock, a.requestId);
    const byRequestId = id !== null && this.opIds.has(id);
    const group = this.group(byRequestId && id !== null ? id : tupleKey(a.lock, token, writer), byRequestId);
    group.applied += 1;
    return group.applied > group.acknowledged.length + group.indeterminate ? group : null;
  }

  /**
   * After every applied write was counted: the first acknowledged operation (in
   * client-record order) that no applied write accounts for, with its group.
   */
  firstLostAck(): { index: number; group: Group } | null {
    let first: { index: number; group: Group } | null = null;
    for (const group of this.groups.values()) {
      if (group.acknowledged.length <= group.applied) continue;
      const index = group.acknowledged[group.applied];
      if (index !== undefined && (first === null || index < first.index)) first = { index, group };
    }
    return first;
  }
}
