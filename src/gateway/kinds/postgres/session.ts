/**
 * The session settings every statement of the postgres kind runs under, in one place:
 * the timeouts (docs/postgres.md promises them) and the output formats the codec reads
 * (codec.ts, datetime.ts). Two ways to set them:
 *
 * - `startup` (a direct connection): as startup parameters of each pooled connection;
 *   each statement then runs on its own, one round trip.
 * - `local` (behind a transaction pooler, `pooler: transaction`): a pooler such as
 *   PgBouncer in transaction mode refuses startup parameters it does not track
 *   (`unsupported startup parameter: statement_timeout`, SQLSTATE 08P01) and hands
 *   each transaction to whichever server session is free, so the settings are made with
 *   SET LOCAL inside every transaction: `BEGIN; SET LOCAL …` (one round trip), the
 *   statement, `COMMIT`.
 */
import type pg from 'pg';

/** A statement running longer is cancelled by Postgres: 504 upstream-timeout (the upstream's `timeoutMs`). */
export const STATEMENT_TIMEOUT_MS = 5000;
/** A transaction left idle (a gateway stopped between statements) is ended by Postgres. */
export const IDLE_IN_TX_TIMEOUT_MS = 10_000;
/** The client gives up on an answer this long after the statement timeout (the network or the server hangs). */
export const QUERY_TIMEOUT_MARGIN_MS = 2000;
/** Opening a connection, or waiting for a free one in the pool. */
export const CONNECT_TIMEOUT_MS = 2000;

/** What the codec reads values in: ISO timestamps in UTC, shortest exact floats, hex bytea. */
const FORMATS: readonly (readonly [string, string])[] = [
  ['TimeZone', 'UTC'],
  ['DateStyle', 'ISO,YMD'],
  ['IntervalStyle', 'postgres'],
  ['extra_float_digits', '1'],
  ['bytea_output', 'hex'],
];

export type Pooler = 'none' | 'transaction';

export interface SessionMode {
  /** Settings made inside each transaction (true) or at connection start. */
  readonly local: boolean;
  /** What opens a transaction: BEGIN, with the SET LOCALs when `local`. */
  readonly begin: string;
  /** The pool's connection settings for this mode. */
  readonly connection: Pick<
    pg.PoolConfig,
    | 'statement_timeout'
    | 'idle_in_transaction_session_timeout'
    | 'options'
    | 'application_name'
    | 'query_timeout'
  >;
}

export function sessionMode(pooler: Pooler, statementTimeoutMs: number): SessionMode {
  const query_timeout = statementTimeoutMs + QUERY_TIMEOUT_MARGIN_MS;
  if (pooler === 'transaction') {
    const timeouts: [string, string][] = [
      ['statement_timeout', String(statementTimeoutMs)],
      ['idle_in_transaction_session_timeout', String(IDLE_IN_TX_TIMEOUT_MS)],
    ];
    const sets = [...timeouts, ...FORMATS].map(([k, v]) => `SET LOCAL ${k} = '${v}'`);
    return {
      local: true,
      begin: ['BEGIN', ...sets].join('; '),
      connection: { application_name: 'fencegate', query_timeout },
    };
  }
  return {
    local: false,
    begin: 'BEGIN',
    connection: {
      application_name: 'fencegate',
      query_timeout,
      statement_timeout: statementTimeoutMs,
      idle_in_transaction_session_timeout: IDLE_IN_TX_TIMEOUT_MS,
      options: FORMATS.map(([k, v]) => `-c ${k}=${v}`).join(' '),
    },
  };
}
