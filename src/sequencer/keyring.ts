/**
 * The keys one process signs and verifies sequencers with, loaded from the key file.
 * It follows the file: a reload (SIGHUP, a change seen by the file watcher, or a
 * sequencer signed with a key id it does not know yet) re-reads it. Refreshes caused by
 * unknown key ids are rate-limited, so a flood of forged key ids costs one file read per
 * interval, not one per request. A file that fails to load keeps the last good keys.
 *
 * Like SSH with a private key, it refuses a key file that group or others may read or
 * write (mode & 077): whoever reads it can sign sequencers. `allowReadable` loads such a
 * file anyway and says so (`onWarning`) at every load.
 */
import { unwatchFile, watchFile, type Stats } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { KeyObject } from 'node:crypto';
import { privateKeyOf, publicKeyOf, readKeyFile, SequencerKeyError, type KeyFile } from './keys.js';

export interface SigningKey {
  kid: string;
  key: KeyObject;
}

export interface Jwk {
  kty: 'OKP';
  crv: 'Ed25519';
  kid: string;
  x: string;
  use: 'sig';
  alg: 'EdDSA';
}

export interface KeyRingOptions {
  /** At most one unknown-kid refresh per this many ms (default 1000). */
  refreshIntervalMs?: number;
  /** Called when a reload fails (the last good keys stay in use). */
  onError?: (err: unknown) => void;
  /** Load a file group or others may access, and warn, instead of refusing it (--allow-readable-key-file). */
  allowReadable?: boolean;
  /** Called with what is wrong with a file loaded anyway (allowReadable). */
  onWarning?: (message: string) => void;
}

/** Reads the key file after checking who else may read it (see the module comment). */
async function readPrivateKeyFile(path: string, options: KeyRingOptions): Promise<KeyFile> {
  let mode: number | null = null;
  try {
    if (process.platform !== 'win32') mode = (await stat(path)).mode & 0o777;
  } catch {
    // readKeyFile says why the file cannot be read.
  }
  if (mode !== null && (mode & 0o077) !== 0) {
    const octal = mode.toString(8).padStart(4, '0');
    const problem = `${path}: the sequencer key file is readable by group or others (mode ${octal}); whoever reads it can sign sequencers`;
    if (!options.allowReadable)
      throw new SequencerKeyError(
        `${problem}: chmod 600 it, or pass --allow-readable-key-file to load it anyway`,
      );
    options.onWarning?.(`${problem} (loaded: --allow-readable-key-file)`);
  }
  return readKeyFile(path);
}

export class KeyRing {
  private signing: SigningKey;
  private publicKeys: Map<string, KeyObject>;
  private published: Jwk[];
  private lastRefresh = -Infinity;
  private refreshing: Promise<boolean> | null = null;
  private watcher: ((cur: Stats, prev: Stats) => void) | null = null;
  private readonly refreshIntervalMs: number;

  private constructor(
    readonly path: string,
    file: KeyFile,
    private readonly options: KeyRingOptions,
  ) {
    this.refreshIntervalMs = options.refreshIntervalMs ?? 1000;
    [this.signing, this.publicKeys, this.published] = KeyRing.build(file);
  }

  static async open(path: string, options: KeyRingOptions = {}): Promise<KeyRing> {
    return new KeyRing(path, await readPrivateKeyFile(path, options), options);
  }

  private static build(file: KeyFile): [SigningKey, Map<string, KeyObject>, Jwk[]] {
    const current = file.keys.find((k) => k.state === 'current');
    if (current === undefined) throw new Error('a validated key file has a current key');
    const publicKeys = new Map(file.keys.map((k) => [k.kid, publicKeyOf(k)] as const));
    const published = file.keys.map((k): Jwk => ({
      kty: 'OKP',
      crv: 'Ed25519',
      kid: k.kid,
      x: k.x,
      use: 'sig',
      alg: 'EdDSA',
    }));
    return [{ kid: current.kid, key: privateKeyOf(current) }, publicKeys, published];
  }

  /** The key that signs new sequencers. */
  get signer(): SigningKey {
    return this.signing;
  }

  /** The public key for `kid`, if the file lists it (next, current or retired). */
  publicKey(kid: string): KeyObject | undefined {
    return this.publicKeys.get(kid);
  }

  /** The JWKS of every accepted key, public parts only. */
  jwks(): { keys: Jwk[] } {
    return { keys: this.published.map((k) => ({ ...k })) };
  }

  /** Re-reads the key file; true when it loaded (false keeps the last good keys). */
  async reload(): Promise<boolean> {
    try {
      const built = KeyRing.build(await readPrivateKeyFile(this.path, this.options));
      [this.signing, this.publicKeys, this.published] = built;
      return true;
    } catch (err) {
      this.options.onError?.(err);
      return false;
    }
  }

  /**
   * A sequencer names a key id this ring does not know: re-read the file, at most once per
   * refresh interval (concurrent callers share one read). True when `kid` is known afterwards.
   */
  async refreshFor(kid: string): Promise<boolean> {
    if (this.publicKeys.has(kid)) return true;
    if (this.refreshing === null) {
      if (performance.now() - this.lastRefresh < this.refreshIntervalMs) return false;
      this.lastRefresh = performance.now();
      this.refreshing = this.reload().finally(() => (this.refreshing = null));
    }
    await this.refreshing;
    return this.publicKeys.has(kid);
  }

  /**
   * Reloads whenever the file changes (stat polling: survives the file being replaced by
   * rename). `reload` replaces this.reload(): with --workers the primary reloads its
   * workers' rings before its own, so the keys it publishes are the ones every worker has.
   */
  watch(intervalMs = 1000, reload: () => Promise<unknown> = () => this.reload()): void {
    if (this.watcher !== null) return;
    this.watcher = (cur, prev) => {
      if (cur.mtimeMs !== prev.mtimeMs || cur.ino !== prev.ino) void reload();
    };
    watchFile(this.path, { interval: intervalMs, persistent: false }, this.watcher);
  }

  close(): void {
    if (this.watcher !== null) unwatchFile(this.path, this.watcher);
    this.watcher = null;
  }
}
