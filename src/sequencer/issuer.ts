/**
 * Signing sequencers for the issuer's acquire and renew answers: the lease's lock,
 * token, lease id and expiry, the store's namespace and epoch, under the key ring's
 * current key. The gateway checks namespace and epoch against its own store
 * (verifier.ts), so a sequencer from another deployment sharing the key file, or from
 * before an epoch bump, is refused.
 */
import { defaultNamespace } from '../store/namespace.js';
import type { Lease, Store } from '../store/types.js';
import { signSequencer } from './format.js';
import type { KeyRing } from './keyring.js';

/** How long the store's epoch id is reused before it is read again. */
const EPOCH_REFRESH_MS = 5_000;

export class SequencerIssuer {
  private epoch: { id: string | null; readAt: number } | null = null;
  /** The read in progress, shared by concurrent signers. */
  private reading: Promise<string | null> | null = null;
  readonly namespace: string;

  constructor(
    readonly keys: KeyRing,
    private readonly store: Store,
    /** The store namespace (--store-namespace); default: the store's default one. */
    namespace?: string | null,
  ) {
    this.namespace = namespace ?? defaultNamespace(store.kind);
    // A new epoch is signed into the next sequencer, not up to EPOCH_REFRESH_MS later.
    store.onReset(() => (this.epoch = null));
  }

  async sign(lease: Lease): Promise<string> {
    const { kid, key } = this.keys.signer;
    const epoch = await this.epochId();
    return signSequencer(
      {
        kid,
        ns: this.namespace,
        lock: lease.key,
        token: lease.token,
        leaseId: lease.leaseId,
        epoch,
        expiresAt: lease.expiresAt,
      },
      key,
    );
  }

  /** The store's epoch id, read again every EPOCH_REFRESH_MS and after a reset. */
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
