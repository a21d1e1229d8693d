/**
 * SqlDriver on PGlite (Postgres 18 compiled to WASM) with its data in a local
 * directory. One connection, used by one process (see dir-lock.ts); PGlite
 * serialises statements and transactions itself.
 *
 * Durability (measured, see docs/stores-sql.md):
 * - PGlite's default start parameters include `-F` (fsync off), and Emscripten's
 *   NODEFS has no fsync at all: Postgres' fsync() calls are no-ops and its
 *   fdatasync() is a stub. Committed WAL still reaches the OS with a write() before
 *   the commit is acknowledged, so a `kill -9` of the process loses nothing, but
 *   a power loss or kernel crash could lose acknowledged grants, and then reuse tokens.
 * - So we start without `-F`, with `wal_sync_method=fsync`, and give NODEFS a real
 *   fsync (fs.fsyncSync on the file's descriptor) before Postgres starts. Every
 *   commit then calls fsync on the WAL segment, as a Postgres server does.
 *   If a PGlite release changes these internals, `synced` is false and health()
 *   says so; the store still works with process-crash durability.
 */
import { fsyncSync } from 'node:fs';
import { PGlite, type Transaction } from '@electric-sql/pglite';
import { NodeFS } from '@electric-sql/pglite/nodefs';
import { StoreUnavailableError } from '../../errors.js';
import {
  executorOver,
  quoteIdent,
  storeError,
  withRetries,
  type SqlDriver,
  type SqlExecutor,
  type SqlValue,
} from './driver.js';

/** Emscripten errno for EIO: returned to Postgres when a real fsync fails (it then PANICs, as it should). */
const EMSCRIPTEN_EIO = 29;

type PgliteFs = ConstructorParameters<typeof NodeFS>[0];
type InitResult = Awaited<ReturnType<NodeFS['init']>>;
type ModuleLike = Parameters<NonNullable<InitResult['emscriptenOpts']['preRun']>[number]>[0];

interface StreamOpsLike {
  fsync?: (stream: { nfd?: unknown }) => number;
}

/** NodeFS whose fsync reaches the disk. Installed in preRun, before Postgres opens any file. */
class SyncingNodeFS extends NodeFS {
  synced = false;

  constructor(dataDir: PgliteFs) {
    super(dataDir);
  }

  override async init(pg: PGlite, opts: Parameters<NodeFS['init']>[1]): Promise<InitResult> {
    const result = await super.init(pg, opts);
    const preRun = [...(result.emscriptenOpts.preRun ?? []), (mod: ModuleLike) => this.install(mod)];
    return { emscriptenOpts: { ...result.emscriptenOpts, preRun } };
  }

  private install(mod: ModuleLike): void {
    const nodefs = (mod as { NODEFS?: { stream_ops?: StreamOpsLike } }).NODEFS;
    const errnoError = (mod as { FS?: { ErrnoError?: new (errno: number) => Error } }).FS?.ErrnoError;
    const ops = nodefs?.stream_ops;
    if (!ops || typeof errnoError !== 'function') return;
    ops.fsync = (stream) => {
      if (typeof stream.nfd !== 'number') return 0; // directories opened for fsync have no descriptor
      try {
        fsyncSync(stream.nfd);
      } catch {
        throw new errnoError(EMSCRIPTEN_EIO);
      }
      return 0;
    };
    this.synced = true;
  }
}

/** PGlite's defaults without `-F`, and an fsync that is a real call (see above). */
function startParams(): string[] {
  return [...PGlite.defaultStartParams.filter((p) => p !== '-F'), '-c', 'wal_sync_method=fsync'];
}

function executor(db: PGlite | Transaction, where: string): SqlExecutor {
  return executorOver(
    where,
    (text, params) => db.query(text, params),
    (text) => db.exec(text),
  );
}

export class PgliteDriver implements SqlDriver {
  readonly kind = 'embedded' as const;
  private closed = false;
  private listening: Promise<void> | null = null;
  private readonly root: SqlExecutor;

  private constructor(
    private readonly db: PGlite,
    readonly where: string,
    /** True when fsync reaches the disk (power-loss durability), false for process-crash durability only. */
    readonly synced: boolean,
  ) {
    this.root = executor(db, where);
  }

  /** Opens (creating if needed) the PGlite data directory `dataDir`. */
  static async open(dataDir: string, where: string): Promise<PgliteDriver> {
    const fs = new SyncingNodeFS(dataDir);
    try {
      const db = await PGlite.create({ fs, relaxedDurability: false, startParams: startParams() });
      return new PgliteDriver(db, where, fs.synced);
    } catch (err) {
      throw storeError(err, where, 'opening the embedded database');
    }
  }

  private assertOpen(): void {
    if (this.closed || this.db.closed) throw new StoreUnavailableError(`${this.where}: store is closed`);
  }

  query<R extends object>(text: string, params?: readonly SqlValue[]): Promise<R[]> {
    this.assertOpen();
    return this.root.query<R>(text, params);
  }

  /** PGlite runs in this process: there is no parse round trip to save, so a plain query. */
  prepared<R extends object>(_name: string, text: string, params: readonly SqlValue[]): Promise<R[]> {
    return this.query<R>(text, params);
  }

  exec(text: string): Promise<void> {
    this.assertOpen();
    return this.root.exec(text);
  }

  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T> {
    return withRetries(async () => {
      this.assertOpen();
      let bodyError: { err: unknown } | null = null;
      try {
        return await this.db.transaction(async (tx) => {
          try {
            return await fn(executor(tx, this.where));
          } catch (err) {
            bodyError = { err };
            throw err;
          }
        });
      } catch (err) {
        // Errors of the body (already StoreUnavailableError, or a bug) pass through as they are.
        if (bodyError !== null) throw (bodyError as { err: unknown }).err;
        throw storeError(err, this.where, 'transaction');
      }
    });
  }

  listen(channel: string, onPayload: (payload: string) => void): Promise<void> {
    try {
      this.assertOpen();
    } catch (err) {
      return Promise.reject(err);
    }
    this.listening ??= (async () => {
      // The same session sends and receives: notifications arrive after the
      // sending transaction commits, as with a server.
      const off = this.db.onNotification((ch, payload) => {
        if (ch === channel) onPayload(payload);
      });
      try {
        await this.exec(`LISTEN ${quoteIdent(channel)}`);
      } catch (err) {
        off();
        this.listening = null;
        throw err;
      }
    })();
    return this.listening;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      await this.db.close();
    } catch (err) {
      throw storeError(err, this.where, 'closing');
    }
  }
}
