/**
 * Mutations that turn a valid history into one that breaks the contract, each in
 * one known way, and pickers for where such a mutation is observable at all.
 */
import type { AppliedRecord, ClientOperation, GrantRecord, History } from './types.js';

/** Renumbers seq 1, 2, 3… so the record stays well-formed after an edit. */
function renumber(applied: AppliedRecord[]): AppliedRecord[] {
  return applied.map((a, i) => ({ ...a, seq: i + 1 }));
}

/** Swaps the apply order of two writes (everything but the seq moves). */
export function swapApplied(h: History, i: number, j: number): History {
  const applied = [...h.applied];
  const a = applied[i];
  const b = applied[j];
  if (a === undefined || b === undefined) throw new RangeError('no such applied writes');
  applied[i] = { ...b, seq: a.seq };
  applied[j] = { ...a, seq: b.seq };
  return { ...h, applied };
}

/** Records grant `g` a second time, for another owner or another lease, at `position`. */
export function duplicateGrant(h: History, g: number, variant: 'owner' | 'lease', position: number): History {
  const grant = h.grants[g];
  if (grant === undefined) throw new RangeError('no such grant');
  const copy: GrantRecord =
    variant === 'owner'
      ? { ...grant, owner: `${grant.owner}-intruder`, leaseId: `${grant.leaseId}-x` }
      : { ...grant, leaseId: `${grant.leaseId}-x` };
  const grants = [...h.grants];
  grants.splice(Math.min(Math.max(position, g + 1), grants.length), 0, copy);
  return { ...h, grants };
}

export function dropApplied(h: History, i: number): History {
  return { ...h, applied: renumber(h.applied.filter((_, k) => k !== i)) };
}

/** Applies operation `op` at `position` of the upstream's record, as if it had been forwarded. */
export function injectApplied(h: History, op: number, position: number, joinById: boolean): History {
  const o = h.operations[op];
  if (o === undefined) throw new RangeError('no such operation');
  const write: AppliedRecord = {
    seq: 0,
    lock: o.lock,
    token: o.token ?? '',
    requestId: joinById ? o.requestId : 'injected',
  };
  const applied = [...h.applied];
  applied.splice(position, 0, write);
  return { ...h, applied: renumber(applied) };
}

/** Pairs (i < j) of applied writes of one lock with different tokens. */
export function swappablePairs(h: History): [number, number][] {
  const pairs: [number, number][] = [];
  h.applied.forEach((a, i) => {
    for (let j = i + 1; j < h.applied.length && pairs.length < 200; j++) {
      const b = h.applied[j];
      if (b !== undefined && b.lock === a.lock && BigInt(b.token) !== BigInt(a.token)) pairs.push([i, j]);
    }
  });
  return pairs;
}

const tupleOf = (lock: string, token: string | null, writer: string) =>
  `${lock}\u0000${token ?? ''}\u0000${writer}`;

/**
 * Counts per (lock, token, writer) of acknowledged, possibly-applied and applied
 * writes, for histories whose records do not join by requestId.
 */
export function tupleCounts(h: History): Map<string, { acked: number; maybe: number; applied: number }> {
  const owners = new Map(h.grants.map((g) => [`${g.lock}\u0000${g.token}`, g.owner]));
  const counts = new Map<string, { acked: number; maybe: number; applied: number }>();
  const get = (k: string) => {
    let c = counts.get(k);
    if (c === undefined) counts.set(k, (c = { acked: 0, maybe: 0, applied: 0 }));
    return c;
  };
  for (const o of h.operations) {
    const c = get(tupleOf(o.lock, o.token, o.writer));
    if (o.acknowledged) c.acked += 1;
    else if (!isRefused(o)) c.maybe += 1;
  }
  for (const a of h.applied)
    get(tupleOf(a.lock, a.token, a.writer ?? owners.get(`${a.lock}\u0000${a.token}`) ?? '')).applied += 1;
  return counts;
}

export function isRefused(o: ClientOperation): boolean {
  return typeof o.status === 'number' && [400, 403, 409, 428, 503].includes(o.status);
}

export { tupleOf };

/**
 * How a write of `token` on `lock` inserted at `position` of the upstream's record
 * would put applied tokens out of order: 'before' when a higher token was applied
 * before it (the write itself is then stale), 'after' when only a lower token is
 * applied after it, null when it fits.
 */
export function breaksOrder(
  h: History,
  lock: string,
  token: bigint,
  position: number,
): 'before' | 'after' | null {
  const same = h.applied.filter((a, i) => a.lock === lock && i < position);
  if (same.some((a) => BigInt(a.token) > token)) return 'before';
  const later = h.applied.filter((a, i) => a.lock === lock && i >= position);
  return later.some((a) => BigInt(a.token) < token) ? 'after' : null;
}

/** Whether `token` was granted for `lock` at all. */
export function wasGranted(h: History, lock: string, token: string | null): boolean {
  return token !== null && h.grants.some((g) => g.lock === lock && g.token === token);
}
