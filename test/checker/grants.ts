/**
 * The issuer's record: (c) no token of a lock is granted twice, to two owners or
 * two leases (a replayed acquire recorded again, same owner and lease, is fine),
 * and tokens of a lock increase with grantedAt where grants carry it.
 */
import { parseToken } from '../../src/tokens.js';
import { grantEvent, violation } from './events.js';
import type { History, Violation } from './types.js';

export interface GrantEntry {
  owner: string;
  leaseId: string;
  /** Index of the first record of this grant. */
  index: number;
}

/** lock → token → the grant of that token. */
export class GrantIndex {
  private readonly byLock = new Map<string, Map<bigint, GrantEntry>>();

  get(lock: string, token: bigint): GrantEntry | undefined {
    return this.byLock.get(lock)?.get(token);
  }

  /** Adds a grant; returns the earlier grant of the same token, if any. */
  add(lock: string, token: bigint, entry: GrantEntry): GrantEntry | undefined {
    let tokens = this.byLock.get(lock);
    if (tokens === undefined) {
      tokens = new Map();
      this.byLock.set(lock, tokens);
    }
    const first = tokens.get(token);
    if (first === undefined) tokens.set(token, entry);
    return first;
  }

  get locks(): Iterable<string> {
    return this.byLock.keys();
  }
}

interface Timed {
  at: number;
  token: bigint;
  index: number;
}

export function indexGrants(
  history: History,
  contextSize: number,
): { ok: true; grants: GrantIndex } | { ok: false; violation: Violation } {
  const grants = new GrantIndex();
  const timed = new Map<string, Timed[]>();
  let duplicate: Violation | null = null;
  let duplicateAt = Infinity;

  for (const [index, g] of history.grants.entries()) {
    const fail = (message: string) => ({
      ok: false as const,
      violation: violation(
        history,
        contextSize,
        'malformed-input',
        g.lock,
        message,
        grantEvent(history, index),
      ),
    });
    const parsed = parseToken(g.token);
    if (!parsed.ok) return fail(`grant #${index} has token ${JSON.stringify(g.token)}: ${parsed.reason}`);
    if (g.lock.length === 0) return fail(`grant #${index} has an empty lock`);
    if (g.grantedAt !== undefined && !Number.isFinite(g.grantedAt)) {
      return fail(`grant #${index} has grantedAt ${String(g.grantedAt)}, not a finite number`);
    }
    const first = grants.add(g.lock, parsed.token, { owner: g.owner, leaseId: g.leaseId, index });
    if (first !== undefined) {
      if ((first.owner !== g.owner || first.leaseId !== g.leaseId) && duplicate === null) {
        duplicateAt = index;
        duplicate = violation(
          history,
          contextSize,
          'duplicate-grant',
          g.lock,
          `token ${g.token} of lock ${JSON.stringify(g.lock)} was granted twice: to ${first.owner} ` +
            `(lease ${first.leaseId}, grant #${first.index}) and to ${g.owner} (lease ${g.leaseId}, grant #${index})`,
          grantEvent(history, index),
          grantEvent(history, first.index),
        );
      }
      continue;
    }
    if (g.grantedAt !== undefined) {
      const list = timed.get(g.lock) ?? [];
      list.push({ at: g.grantedAt, token: parsed.token, index });
      timed.set(g.lock, list);
    }
  }

  const regression = firstRegression(timed);
  if (regression !== null && regression.late.index < duplicateAt) {
    const { late, early } = regression;
    const g = history.grants[late.index];
    const lock = g?.lock ?? '';
    return {
      ok: false,
      violation: violation(
        history,
        contextSize,
        'grant-regression',
        lock,
        `token ${late.token} of lock ${JSON.stringify(lock)} was granted at ${late.at}, after token ` +
          `${early.token} was granted at ${early.at}: tokens must increase with every grant`,
        grantEvent(history, late.index),
        grantEvent(history, early.index),
      ),
    };
  }
  if (duplicate !== null) return { ok: false, violation: duplicate };
  return { ok: true, grants };
}

/**
 * Among grants with a time, those whose token is below a token granted strictly
 * earlier; the one first in record order, with the earlier, higher grant.
 */
function firstRegression(timed: Map<string, Timed[]>): { late: Timed; early: Timed } | null {
  let found: { late: Timed; early: Timed } | null = null;
  for (const list of timed.values()) {
    const sorted = [...list].sort(
      (a, b) => a.at - b.at || (a.token < b.token ? -1 : a.token > b.token ? 1 : 0),
    );
    let top: Timed | null = null;
    let i = 0;
    while (i < sorted.length) {
      // Grants at the same instant are not ordered against each other.
      let j = i;
      while (j < sorted.length && sorted[j]?.at === sorted[i]?.at) j += 1;
      const group = sorted.slice(i, j);
      for (const g of group) {
        if (top !== null && g.token < top.token && (found === null || g.index < found.late.index)) {
          found = { late: g, early: top };
        }
      }
      for (const g of group) if (top === null || g.token > top.token) top = g;
      i = j;
    }
  }
  return found;
}
