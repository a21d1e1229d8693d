/**
 * The multi-lock acquire, composed over the Store seam that single acquires use (per key:
 * tryAcquire, the FIFO queue, renew, release), so every store has it, and a store added
 * later has it without a method of its own. Deadlock-free because every caller takes its
 * keys in one canonical order (./order.ts); all or nothing; one lease id for all keys
 * (AcquireRequest.leaseId), one token per key. See docs/issuer.md.
 */
import { randomUUID } from 'node:crypto';
import type { FencingToken } from '../tokens.js';
import type { Lease, Store } from '../store/types.js';
import type { AcquireAnswer, AcquireManyInput, IssuerAcquireManyResult, QueueInput } from './types.js';

/** What acquireAll needs of the issuer. */
export interface ManyOps {
  /** One key's acquire, waiting in its FIFO queue until input.deadline. */
  acquireOne(input: QueueInput, started: number, signal: AbortSignal): Promise<AcquireAnswer>;
  store: Store;
  /** How often leases already taken are renewed while a later key is waited for. */
  renewEveryMs(ttlMs: number): number;
}

/** A lease taken so far, and when (performance.now()) the store call that set its expiry was sent. */
interface Taken {
  lease: Lease;
  since: number;
}

/**
 * Acquires `input.keys` (already in canonical order, distinct) one after the other.
 * Anything but a grant of every key releases what was taken (a store that fails to
 * release lets those leases lapse after ttlMs).
 */
export async function acquireAll(
  ops: ManyOps,
  input: AcquireManyInput & { keys: readonly string[] },
  started: number,
  signal: AbortSignal,
): Promise<IssuerAcquireManyResult> {
  const taken: Taken[] = [];
  const issued: Lease[] = [];
  const lapsed: { key: string; owner: string; token: FencingToken }[] = [];
  let leaseId: string = randomUUID();
  let lost: string | null = null;
  const renewTaken = async (): Promise<void> => {
    for (const t of taken) {
      const sent = performance.now();
      const r = await ops.store.renew(t.lease.key, t.lease.leaseId, input.ttlMs);
      if (!r.ok) {
        lost = t.lease.key;
        throw new LeaseLost();
      }
      t.lease = r.lease;
      t.since = sent;
    }
  };
  let complete = false;
  try {
    for (const key of input.keys) {
      const queued: QueueInput = {
        key,
        owner: input.owner,
        ttlMs: input.ttlMs,
        waitMs: input.waitMs,
        deadline: started + input.waitMs,
        leaseId,
        ...(input.requestId === undefined ? {} : { requestId: input.requestId }),
        ...(taken.length === 0 ? {} : { tick: { everyMs: ops.renewEveryMs(input.ttlMs), run: renewTaken } }),
      };
      const r = await ops.acquireOne(queued, started, signal);
      if (!r.ok) return { ...r, key };
      if (r.replayed) {
        // A retry of an acquire-many whose answer was lost: its first key names the lease id.
        if (taken.length === 0) leaseId = r.lease.leaseId;
        else if (r.lease.leaseId !== leaseId) {
          return { ok: false, reason: 'replay-ended', key, leaseId: r.lease.leaseId, token: r.lease.token };
        }
      } else issued.push(r.lease);
      taken.push({ lease: r.lease, since: started + r.waitedMs });
      if (r.lapsed !== null) lapsed.push({ key, ...r.lapsed });
    }
    complete = true;
  } catch (err) {
    if (!(err instanceof LeaseLost)) throw err;
    return { ok: false, reason: 'lease-lost', key: lost ?? '' };
  } finally {
    if (!complete) await releaseAll(ops.store, taken);
  }
  const leases = taken.map((t) => t.lease);
  return {
    ok: true,
    owner: input.owner,
    leaseId,
    ttlMs: input.ttlMs,
    leases,
    expiresAt: Math.min(...leases.map((l) => l.expiresAt)),
    replayed: issued.length === 0,
    issued,
    waitedMs: Math.floor(Math.min(...taken.map((t) => t.since)) - started),
    lapsed,
  };
}

/** Thrown from a renewal inside the queue wait to end it: a lease taken earlier is gone. */
class LeaseLost extends Error {}

async function releaseAll(store: Store, taken: readonly Taken[]): Promise<void> {
  await Promise.all(taken.map((t) => store.release(t.lease.key, t.lease.leaseId).catch(() => undefined)));
}
