/**
 * SqlDriver on a real Postgres server through `pg`: a small pool for statements and
 * transactions, plus one dedicated client for LISTEN that reconnects by itself.
 *
 * Failing fast is part of the contract: connecting gives up after
 * CONNECT_TIMEOUT_MS, statements after STATEMENT_TIMEOUT_MS (server side) or
 * QUERY_TIMEOUT_MS (client side, when the server is gone silently), so a fenced
 * write gets its 503 within seconds instead of hanging.
 */
import pg from 'pg';
import { StoreUnavailableError } from '../../errors.js';
import {
  connectionBroken,
  executorOver,
  quoteIdent,
  storeError,
  withRetries,
  type SqlDriver,
  type SqlExecutor,
  type SqlValue,
} from './driver.js';
import { pgConnection } from './pg-ssl.js';

const CONNECT_TIMEOUT_MS = 2000;
const STATEMENT_TIMEOUT_MS = 5000;
const QUERY_TIMEOUT_MS = 7000;
const IDLE_IN_TX_TIMEOUT_MS = 10_000;
const POOL_SIZE = 10;
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5000;

/** Host, port and database of a postgres URL, without credentials, for messages. */
export function describeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `postgres://${u.hostname}${u.port ? `:${u.port}` : ''}${u.pathname}`;
  } catch {
    return 'postgres (unparseable URL)';
  }
}

function clientConfig(url: string): pg.ClientConfig {
  // sslmode & co. applied as libpq documents them (./pg-ssl.ts); throws naming a bad file.
  const { connectionString, ssl } = pgConnection(url);
  return {
    connectionString,
    ssl,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    statement_timeout: STATEMENT_TIMEOUT_MS,
    query_timeout: QUERY_TIMEOUT_MS,
    idle_in_transaction_session_timeout: IDLE_IN_TX_TIMEOUT_MS,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    application_name: 'fencegate',
  };
}

function executor(client: pg.ClientBase, where: string): SqlExecutor {
  return executorOver(
    where,
    (text, params) => client.query(text, params),
    (text) => client.query(text),
  );
}

/** The dedicated LISTEN connection. Reconnects with backoff until closed. */
class PgListener {
  private client: pg.Client | null = null;
  private connecting: Promise<void> | null = null;
  private everConnected = false;
  private closed = false;
  private timer: NodeJS.Timeout | null = null;
  private backoff = RECONNECT_MIN_MS;

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly where: string,
    private readonly channel: string,
    private readonly onPayload: (payload: string) => void,
    private readonly onResync: () => void,
  ) {}

  /** Resolves once LISTEN is active (now or after connecting). */
  ensure(): Promise<void> {
    if (this.closed) return Promise.reject(new StoreUnavailableError(`${this.where}: store is closed`));
    if (this.client) return Promise.resolve();
    return this.connect();
  }

  private connect(): Promise<void> {
    if (this.connecting) return this.connecting;
    this.connecting = (async () => {
      const client = new pg.Client(this.config);
      client.on('error', () => this.lost(client));
      client.on('end', () => this.lost(client));
      client.on('notification', (msg) => {
        if (msg.channel === this.channel) this.onPayload(msg.payload ?? '');
      });
      try {
        await client.connect();
        await client.query(`LISTEN ${quoteIdent(this.channel)}`);
      } catch (err) {
        client.end().catch(() => undefined);
        throw storeError(err, this.where, 'LISTEN');
      }
      if (this.closed) {
        await client.end().catch(() => undefined);
        throw new StoreUnavailableError(`${this.where}: store is closed`);
      }
      this.client = client;
      this.backoff = RECONNECT_MIN_MS;
      const resync = this.everConnected;
      this.everConnected = true;
      if (resync) this.onResync();
    })().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  private lost(client: pg.Client): void {
    if (this.client !== client) return;
    this.client = null;
    client.end().catch(() => undefined);
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.timer) return;
    const delay = this.backoff;
    this.backoff = Math.min(this.backoff * 2, RECONNECT_MAX_MS);
    this.timer = setTimeout(() => {
      this.timer = null;
      if (this.closed || this.client) return;
      this.connect().catch(() => this.scheduleReconnect());
    }, delay);
    this.timer.unref();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const client = this.client;
    this.client = null;
    if (this.connecting) await this.connecting.catch(() => undefined);
    if (client) await client.end().catch(() => undefined);
  }
}

export class PgDriver implements SqlDriver {
  readonly kind = 'postgres' as const;
  readonly where: string;
  private readonly pool: pg.Pool;
  private readonly config: pg.ClientConfig;
  private listener: PgListener | null = null;
  private closed = false;

  constructor(url: string) {
    this.where = describeUrl(url);
    this.config = clientConfig(url);
    this.pool = new pg.Pool({ ...this.config, max: POOL_SIZE, idleTimeoutMillis: 30_000 });
    // Idle clients that lose their connection emit here; the pool drops them and
    // the next checkout connects afresh. Without a handler the process would crash.
    this.pool.on('error', () => undefined);
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreUnavailableError(`${this.where}: store is closed`);
  }

  async query<R extends object>(text: string, params: readonly SqlValue[] = []): Promise<R[]> {
    this.assertOpen();
    try {
      const res = await this.pool.query<R>(text, params as SqlValue[]);
      return res.rows;
    } catch (err) {
      throw storeError(err, this.where, 'statement');
    }
  }

  async prepared<R extends object>(name: string, text: string, params: readonly SqlValue[]): Promise<R[]> {
    this.assertOpen();
    try {
      const res = await this.pool.query<R>({ name, text, values: params as SqlValue[] });
      return res.rows;
    } catch (err) {
      throw storeError(err, this.where, 'statement');
    }
  }

  async exec(text: string): Promise<void> {
    this.assertOpen();
    try {
      await this.pool.query(text);
    } catch (err) {
      throw storeError(err, this.where, 'statement');
    }
  }

  transaction<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T> {
    return withRetries(() => this.once(fn));
  }

  private async once<T>(fn: (tx: SqlExecutor) => Promise<T>): Promise<T> {
    this.assertOpen();
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      throw storeError(err, this.where, 'connect');
    }
    const tx = executor(client, this.where);
    let broken: Error | undefined;
    // pg-pool drops its idle 'error' listener while a client is checked out; a connection
    // that dies mid-transaction (Postgres killed) then emits an unhandled 'error' that would
    // end the process. Keep one until release, and release the client as broken.
    const onError = (err: Error) => {
      broken = err;
    };
    client.on('error', onError);
    try {
      await tx.exec('BEGIN');
      const result = await fn(tx);
      await tx.exec('COMMIT');
      return result;
    } catch (err) {
      if (connectionBroken(err)) {
        // No ROLLBACK on a dead or hung connection (it would wait out another timeout):
        // destroying it ends the transaction on the server.
        broken = err instanceof Error ? err : new Error('connection broken');
      } else {
        try {
          await client.query('ROLLBACK');
        } catch (rollbackErr) {
          broken = rollbackErr instanceof Error ? rollbackErr : new Error('rollback failed');
        }
      }
      throw err;
    } finally {
      // A broken client is destroyed and may still emit: it keeps the listener.
      if (broken === undefined) client.off('error', onError);
      client.release(broken);
    }
  }

  listen(channel: string, onPayload: (payload: string) => void, onResync: () => void): Promise<void> {
    try {
      this.assertOpen();
    } catch (err) {
      return Promise.reject(err);
    }
    this.listener ??= new PgListener(this.config, this.where, channel, onPayload, onResync);
    return this.listener.ensure();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.listener?.close();
    await this.pool.end().catch(() => undefined);
  }
}
