/**
 * What every store keeps to notice, in this process, that its state may have been lost
 * or replaced (docs/adr/0019-store-identity.md): the epoch it last knew, the listeners to
 * tell when another one shows up (Store.onReset), and the highest token it has seen
 * issued or admitted, which a store whose identity changed raises its floor above.
 */
import type { FencingToken } from '../tokens.js';
import type { StoreReset } from './types.js';

type Listener = (reset: StoreReset) => void;

export class ResetWatch {
  private knownEpoch: string | null = null;
  private readonly listeners = new Set<Listener>();
  /** The highest token this process saw issued or admitted (0n: none yet). */
  highest = 0n;

  /** A token this process saw issued, renewed or admitted. */
  saw(token: FencingToken): void {
    if (token > this.highest) this.highest = token;
  }

  /**
   * The epoch the store answered with: a reset when this process knew another one (the
   * first epoch it sees is only remembered).
   */
  epoch(id: string, floor: FencingToken, reason: string): void {
    const known = this.knownEpoch;
    this.knownEpoch = id;
    if (known !== null && known !== id) this.emit({ reason, floor });
  }

  /** A reset seen otherwise (the store behind the connection is not the one this process knew). */
  emit(reset: StoreReset): void {
    for (const listener of [...this.listeners]) listener(reset);
  }

  onReset(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
