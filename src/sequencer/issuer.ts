/**
 * Signing sequencers for the issuer's acquire and renew answers: the lease's lock,
 * token, lease id and expiry, and the store's epoch, under the key ring's current key.
 */
import type { Lease, Store } from '../store/types.js';
import { signSequencer } from './format.js';
import type { KeyRing } from './keyring.js';

/** How long the store's epoch id is reused before it is read again. */
const EPOCH_REFRESH_MS = 5_000;

export class SequencerIssuer {
  private epoch: { id: string | null; readAt: number } | null = null;
  /** The read in progress, shared by concurrent signers. */
  private reading: Promise<string | null> | null = null;

  constructor(
    readonly keys: KeyRing,
    private readonly store: Store,
  ) {}

  async sign(lease: Lease): Promise<string> {
    const { kid, key } = this.keys.signer;
    const epoch = await this.epochId();
    return signSequencer(
      { kid, lock: lease.key, token: lease.token, leaseId: lease.leaseId, epoch, expiresAt: lease.expiresAt },
      key,
    );
  }

  /**
   * The epoch only labels the sequencer (for audits); it protects nothing by itself: after
   * a new epoch every older token is below the floor and refused as stale anyway.
   */
  private async epochId(): Promise<string | null> {
    const now = performance.now();
    if (this.epoch !== null && now - this.epoch.readAt < EPOCH_REFRESH_MS) return this.epoch.id;
    this.reading ??= this.store
      .health()
      .catch(() => null)
      .then((health) => {
        const id = health?.epoch?.id ?? this.epoch?.id ?? null;
        this.epoch = { id, readAt: now };
        return id;
      })
      .finally(() => (this.reading = null));
    return this.reading;
  }
}
