/**
 * What a failed statement means for the client, decided by SQLSTATE (`err.code`),
 * never by message text:
 *
 * - class 23 (integrity constraint): 409 constraint-violation, naming the constraint
 *   (and the column, for NOT NULL);
 * - class 22 (data exception: a value Postgres refused, e.g. a day 30 in February):
 *   400 invalid-row (rows.ts names the column). Bad input is never a 500;
 * - no SQLSTATE (socket error, client timeout), class 08 (connection), 57P0x
 *   (shutdown), 53 (resources), 40001/40P01: the database is unavailable, 502
 *   upstream-unavailable with Retry-After;
 * - 57014 (statement timeout): 504 upstream-timeout;
 * - 42P05, 26000 (a prepared statement that already exists, or does not): a connection
 *   pooler handed this connection's statements to another server session. 502
 *   upstream-unavailable saying so: the upstream needs `pooler: transaction`;
 * - class 42 and 3F (the table, a column or the schema is not what the policy says):
 *   502 upstream-unavailable, logged as a configuration error.
 *
 * Anything else is a bug and surfaces as 500.
 */
import { ProblemError } from '../../../errors.js';
import { errorCode } from '../../../store/sql/driver.js';

export interface DbErrorFields {
  code?: string;
  constraint?: string;
  column?: string;
  table?: string;
}

function fields(err: unknown): DbErrorFields {
  if (typeof err !== 'object' || err === null) return {};
  const e = err as Record<string, unknown>;
  const str = (k: string): string | undefined => (typeof e[k] === 'string' ? (e[k] as string) : undefined);
  return { code: errorCode(err), constraint: str('constraint'), column: str('column'), table: str('table') };
}

export type Classified =
  | { kind: 'refusal'; problem: ProblemError }
  /** The policy and the database (or a pooler) disagree; `log` says how. */
  | { kind: 'misconfigured'; problem: ProblemError; log: string }
  | { kind: 'unavailable'; problem: ProblemError }
  | { kind: 'bug' };

/** 502: the table does not match the policy (the log says how). */
export function tableMismatch(upstream: string, code?: string): ProblemError {
  const sqlstate = code === undefined ? '' : ` (SQLSTATE ${code})`;
  return new ProblemError(
    'upstream-unavailable',
    `the table does not match the policy${sqlstate}; see the gateway log`,
    { upstream },
  );
}

export function classifyDbError(err: unknown, upstream: string): Classified {
  const f = fields(err);
  const code = f.code;
  if (code === undefined || /^E[A-Z]+$/.test(code))
    return unavailable(upstream, `database unreachable (${code ?? 'connection lost or timed out'})`);
  if (code.startsWith('23')) {
    return {
      kind: 'refusal',
      problem: new ProblemError(
        'constraint-violation',
        `the row violates ${f.constraint !== undefined ? `constraint "${f.constraint}"` : 'a constraint'} (SQLSTATE ${code})`,
        { constraint: f.constraint, column: f.column },
      ),
    };
  }
  if (code.startsWith('22')) {
    return {
      kind: 'refusal',
      problem: invalidRow(`the database refused a value (SQLSTATE ${code})`, f.column),
    };
  }
  if (code === '57014') {
    return {
      kind: 'unavailable',
      problem: new ProblemError('upstream-timeout', 'the statement timed out', { upstream }),
    };
  }
  return serverTrouble(code, upstream);
}

/** 502 upstream-unavailable with Retry-After: the database may be back soon. */
function unavailable(upstream: string, detail: string): Classified {
  return {
    kind: 'unavailable',
    problem: new ProblemError(
      'upstream-unavailable',
      detail,
      { upstream },
      { headers: { 'retry-after': '1' } },
    ),
  };
}

/**
 * A SQLSTATE that is neither the row's fault nor a timeout: a pooler, the connection,
 * the server's resources or its schema (unavailable or misconfigured); else a bug.
 */
function serverTrouble(code: string, upstream: string): Classified {
  if (code === '42P05' || code === '26000') {
    const detail =
      `a prepared statement was ${code === '42P05' ? 'already there' : 'missing'} on the server session (SQLSTATE ${code}): ` +
      'a connection pooler shares server sessions between clients; the upstream needs "pooler: transaction"';
    return {
      kind: 'misconfigured',
      problem: new ProblemError('upstream-unavailable', detail, { upstream }),
      log: 'prepared statements behind a transaction pooler; set "pooler: transaction" on the upstream',
    };
  }
  if (code === '08P01') {
    // PgBouncer in transaction mode refuses startup parameters it does not track.
    return unavailable(
      upstream,
      'the database (or a pooler in front of it) refused the connection (SQLSTATE 08P01); behind a transaction pooler the upstream needs "pooler: transaction"',
    );
  }
  if (
    code.startsWith('08') ||
    code.startsWith('53') ||
    code.startsWith('57P') ||
    code === '40001' ||
    code === '40P01' ||
    code === '25P03' ||
    code === '55P03'
  ) {
    return unavailable(upstream, `database unavailable (SQLSTATE ${code})`);
  }
  if (code.startsWith('42') || code.startsWith('3F')) {
    return {
      kind: 'misconfigured',
      problem: tableMismatch(upstream, code),
      log: 'the table does not match the policy',
    };
  }
  return { kind: 'bug' };
}

/** 400 invalid-row, naming the column at fault when there is one. */
export function invalidRow(detail: string, column?: string): ProblemError {
  return new ProblemError('invalid-row', detail, { column });
}
