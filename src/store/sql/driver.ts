/**
 * The small driver abstraction under the SQL store (`pg`; it also carried the
 * PGlite embedded store until docs/adr/0009-embedded-store.md): run one
 * parameterised statement, run several statements in a transaction, and LISTEN on
 * one channel.
 *
 * Every failure that comes out of a driver is a StoreUnavailableError (with the
 * driver's error as `cause`): expected outcomes never reach this layer as errors.
 */
import { namespaceProblem } from '../namespace.js';
import { StoreUnavailableError } from '../../errors.js';

/**
 * Values passed as statement parameters. Tokens and store times are passed as decimal
 * strings; arrays (of text, cast in the statement, e.g. `$1::bigint[]`) carry batches.
 */
export type SqlValue = string | number | boolean | null | readonly (string | null)[];

export interface SqlExecutor {
  /** Runs one statement with `$n` parameters and returns its rows. */
  query<R extends object>(text: string, params?: readonly SqlValue[]): Promise<R[]>;
  /** Runs several statements without parameters (DDL). */
  exec(text: string): Promise<void>;
}

export interface SqlDriver extends SqlExecutor {
  readonly kind: 'postgres';
  /** Where the data lives, for messages (no credentials). */
  readonly where: string;
  /**
   * Runs one statement like `query`, kept prepared under `name` where the driver can
   * (Postgres: parsed and planned once per pooled connection). `name` must always go
   * with the same `text`.
   */
  prepared<R extends object>(name: string, text: string, params: readonly SqlValue[]): Promise<R[]>;
  /**
   * Runs `fn` in one READ COMMITTED transaction: committed if it resolves, rolled
   * back if it throws. Retried a few times on serialization failure or deadlock.
   */
  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T>;
  /**
   * Makes sure `LISTEN channel` is active, connecting if needed; resolves once it is.
   * The handlers of the first call are kept: `onPayload` for each notification,
   * `onResync` after the listening connection was re-established (notifications
   * may have been missed meanwhile).
   */
  listen(channel: string, onPayload: (payload: string) => void, onResync: () => void): Promise<void>;
  close(): Promise<void>;
}

/** SQLSTATEs after which the whole transaction may simply be run again. */
const RETRYABLE = new Set(['40001', '40P01']);

export function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

export function isRetryable(err: unknown): boolean {
  const cause = err instanceof StoreUnavailableError ? err.cause : err;
  const code = errorCode(cause);
  return code !== undefined && RETRYABLE.has(code);
}

/**
 * True when the error means the connection itself is gone or hung (no SQLSTATE: a
 * socket error or a client-side timeout; or a connection-class SQLSTATE), so the
 * connection must be discarded rather than reused.
 */
export function connectionBroken(err: unknown): boolean {
  if (err instanceof StoreUnavailableError && err.cause === undefined) return false; // ours, not the driver's
  const code = errorCode(err instanceof StoreUnavailableError ? err.cause : err);
  if (code === undefined || /^E[A-Z]+$/.test(code)) return true;
  return (
    code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03' || code === '25P03'
  );
}

/** Describes a driver error by its code (never by its message text). */
export function classify(code: string | undefined): string {
  if (code === undefined) return 'connection lost or timed out';
  if (/^E[A-Z]+$/.test(code)) return `unreachable (${code})`;
  if (code.startsWith('08')) return `connection failure (SQLSTATE ${code})`;
  if (code === '57P01' || code === '57P02' || code === '57P03')
    return `server shutting down or starting (SQLSTATE ${code})`;
  if (code === '57014') return 'statement timed out or was cancelled (SQLSTATE 57014)';
  if (code === '55P03') return 'lock wait timed out (SQLSTATE 55P03)';
  if (code.startsWith('53')) return `server out of resources (SQLSTATE ${code})`;
  if (code === '25P03') return 'idle transaction timed out (SQLSTATE 25P03)';
  if (RETRYABLE.has(code)) return `transaction conflict (SQLSTATE ${code})`;
  if (code === '3F000' || code === '42P01' || code === '42883')
    return `schema missing or damaged (SQLSTATE ${code})`;
  return `database error (SQLSTATE ${code})`;
}

/** Wraps any driver failure into the one exception stores throw. */
export function storeError(err: unknown, where: string, what: string): StoreUnavailableError {
  if (err instanceof StoreUnavailableError) return err;
  const detail = err instanceof Error && err.message ? `: ${err.message.split('\n')[0]}` : '';
  return new StoreUnavailableError(`${where}: ${what} failed, ${classify(errorCode(err))}${detail}`, {
    cause: err,
  });
}

/**
 * A SqlExecutor over one driver connection or transaction: `query` returns the rows of a
 * parameterised statement, `exec` runs statements without parameters; every failure
 * comes out as a StoreUnavailableError naming `where`.
 */
export function executorOver(
  where: string,
  query: (text: string, params: SqlValue[]) => Promise<{ rows: unknown[] }>,
  exec: (text: string) => Promise<unknown>,
): SqlExecutor {
  return {
    async query<R extends object>(text: string, params: readonly SqlValue[] = []): Promise<R[]> {
      try {
        return (await query(text, params as SqlValue[])).rows as R[];
      } catch (err) {
        throw storeError(err, where, 'statement');
      }
    },
    async exec(text: string): Promise<void> {
      try {
        await exec(text);
      } catch (err) {
        throw storeError(err, where, 'statement');
      }
    },
  };
}

/** Names we accept as a schema (namespace). Quoted everywhere, so case and '-' are kept as given. */
/** Throws StoreUnavailableError (the store cannot be opened) unless `name` is a valid namespace. */
export function checkNamespace(name: string): string {
  const problem = namespaceProblem(name);
  if (problem !== null) throw new StoreUnavailableError(problem);
  return name;
}

export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** The NOTIFY channel of one schema: payloads are lock keys. */
export function channelFor(namespace: string): string {
  return `fencegate:${namespace}`;
}

/** Runs `fn` as a transaction body with retries on serialization failure / deadlock. */
export async function withRetries<T>(attempt: () => Promise<T>, tries = 3): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await attempt();
    } catch (err) {
      if (i >= tries || !isRetryable(err)) throw err;
      await new Promise((resolve) => setTimeout(resolve, 5 * i + Math.floor(Math.random() * 10)));
    }
  }
}
