/**
 * Runs the postgres kind's statements on the upstream's pool, in the session mode
 * (session.ts), and makes sure none runs on column types other than those it was built
 * for (catalog.ts):
 *
 * - A row statement's result carries the table's columns as they are; Postgres reports
 *   their types and modifiers, which must be the catalog's. A read of other types is
 *   thrown away (SchemaChanged) and made again.
 * - A write runs inside BEGIN … COMMIT, the types checked before COMMIT, unless it is a
 *   prepared statement this connection already ran checked: then Postgres itself refuses
 *   it once the table's columns changed (SQLSTATE 0A000, "cached plan must not change
 *   result type"), before it runs. So in the steady state a write is one statement and
 *   one round trip; the first run of each statement on each connection costs two more.
 * - Behind a transaction pooler every statement runs inside BEGIN … COMMIT anyway (its
 *   SET LOCALs), checked before COMMIT.
 *
 * Values come back as the text Postgres printed (no type parsers): the codec reads them.
 */
import type pg from 'pg';
import { connectionBroken, errorCode } from '../../../store/sql/driver.js';
import type { Column } from './column.js';
import type { StatementNames } from './prepared.js';
import type { SessionMode } from './session.js';

/** The table's columns are not what the statement was built for; it wrote nothing. */
export class SchemaChanged extends Error {
  constructor() {
    super('the table changed under a statement');
  }
}

export interface Statement {
  readonly text: string;
  readonly values: readonly (string | null)[];
  /** It writes: a result of unexpected types must never commit. */
  readonly writes: boolean;
  /** The table's generation the statement was built for (names per generation); none: not a row statement. */
  readonly generation?: number;
  /** The table columns the result carries, from column `offset` on. */
  readonly columns?: readonly Column[];
  readonly offset?: number;
}

export type Rows = (string | null)[][];

/** Every value as the text Postgres sent. */
const AS_TEXT = { getTypeParser: () => (text: string) => text };

export class StatementRunner {
  /** Statement names each connection ran checked (the connection is the pool's client object). */
  private readonly checked = new WeakMap<object, Set<string>>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly mode: SessionMode,
    private readonly names: StatementNames,
  ) {}

  async run(s: Statement): Promise<Rows> {
    const name = s.generation === undefined ? undefined : this.names.of(s.text, s.generation);
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      const checked = this.checkedOn(client);
      let res: pg.QueryResult<(string | null)[]>;
      if (this.mode.local || (s.writes && (name === undefined || !checked.has(name)))) {
        res = await this.within(client, async () => {
          const inside = await this.execute(client, s, name);
          if (!sameTypes(inside.fields, s)) throw new SchemaChanged();
          return inside;
        });
      } else {
        res = await this.execute(client, s, name);
        if (!sameTypes(res.fields, s)) {
          // A write here is prepared and was checked on this connection: Postgres holds
          // its result to those types (0A000 otherwise), and it has committed.
          if (s.writes) throw new Error('a checked prepared write reported other column types');
          throw new SchemaChanged();
        }
      }
      if (name !== undefined) checked.add(name);
      return res.rows;
    } catch (err) {
      broken = brokenBy(err);
      throw err;
    } finally {
      client.release(broken);
    }
  }

  /** `fn` inside one transaction of the session mode (the DDL of the fence table). */
  async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    try {
      return await this.within(client, () => fn(client));
    } catch (err) {
      broken = brokenBy(err);
      throw err;
    } finally {
      client.release(broken);
    }
  }

  private checkedOn(client: object): Set<string> {
    let set = this.checked.get(client);
    if (set === undefined) this.checked.set(client, (set = new Set()));
    return set;
  }

  private async within<T>(client: pg.PoolClient, fn: () => Promise<T>): Promise<T> {
    await client.query(this.mode.begin);
    try {
      const out = await fn();
      await client.query('COMMIT');
      return out;
    } catch (err) {
      // A lost or hung connection is dropped, which ends its transaction.
      if (!connectionBroken(err))
        await client.query('ROLLBACK').catch((rollback: unknown) => {
          throw connectionBroken(rollback) ? rollback : err;
        });
      throw err;
    }
  }

  private async execute(
    client: pg.PoolClient,
    s: Statement,
    name: string | undefined,
  ): Promise<pg.QueryResult<(string | null)[]>> {
    try {
      return await client.query<(string | null)[]>({
        name,
        text: s.text,
        values: s.values as (string | null)[],
        rowMode: 'array',
        types: AS_TEXT,
      });
    } catch (err) {
      if (errorCode(err) === '0A000') throw new SchemaChanged();
      throw err;
    }
  }
}

/**
 * What to release a connection with after `err`: a statement's error leaves the
 * connection (and what it prepared) usable; a lost or hung one is dropped.
 */
function brokenBy(err: unknown): Error | undefined {
  if (!connectionBroken(err)) return undefined;
  return err instanceof Error ? err : new Error(String(err));
}

/** Whether the result reports the types and modifiers of the statement's columns. */
function sameTypes(fields: readonly pg.FieldDef[], s: Statement): boolean {
  const { columns, offset = 0 } = s;
  if (columns === undefined) return true;
  if (fields.length !== offset + columns.length) return false;
  return columns.every((c, i) => {
    const f = fields[offset + i] as pg.FieldDef;
    return f.dataTypeID === c.oid && f.dataTypeModifier === c.typmod;
  });
}
