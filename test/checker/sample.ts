/**
 * Adapter from the sample upstream's write log (src/sample, GET /_writes) to the
 * checker's AppliedRecord. The sample records the Fencing-Token, the lock the
 * gateway fenced the write by (x-fencegate-lock), the client's own X-Request-Id
 * and X-Client-Id when sent. Where the client sent no id, the gateway's request id
 * is used; where it sent no X-Client-Id, the checker takes the writer to be the
 * owner the token was granted to.
 */
import type { AppliedWrite } from '../../src/sample/index.js';
import type { AppliedRecord } from './types.js';

/**
 * `lockOf` returns the lock a write was fenced by, or null for writes on unfenced
 * routes, which are left out. Writes that came without a token keep token '' and
 * so are reported as 'ungranted-token' if their route was fenced.
 */
export function appliedFromSample(
  writes: readonly AppliedWrite[],
  lockOf: (write: AppliedWrite) => string | null = (w) => w.lock,
): AppliedRecord[] {
  const out: AppliedRecord[] = [];
  for (const w of writes) {
    const lock = lockOf(w);
    if (lock === null) continue;
    out.push({
      seq: w.seq,
      lock,
      token: w.fencingToken ?? '',
      requestId: w.clientRequestId ?? w.requestId,
      ...(w.writer !== null ? { writer: w.writer } : {}),
      path: `/orders/${encodeURIComponent(w.id)}`,
      at: w.at,
    });
  }
  return out;
}

/** The sample's `/orders/:orderId` writes, fenced by `order:{orderId}` as in policies/orders.yaml. */
export const orderLock = (w: AppliedWrite): string => `order:${w.id}`;
