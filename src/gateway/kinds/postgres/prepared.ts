/**
 * Names for the postgres kind's statements, so each pooled connection parses and plans a
 * statement once and then only binds and executes it (node-postgres prepares a named
 * query on a connection the first time that connection runs it). A fenced write is one
 * statement with two upserts in CTEs: unnamed, Postgres parsed and planned it on every
 * write, about half of the database's CPU per write (docs/postgres.md, "Performance").
 *
 * Names are given per distinct text, in order (`fg1`, `fg2`, …), so two texts never share
 * one. The texts a route can produce are bounded by its columns, but a PATCH names any
 * subset of them: past MAX_NAMED texts, new ones run unnamed (parsed each time), so
 * neither side's memory grows without bound. Postgres re-plans a prepared statement by
 * itself when a table it reads is altered; its result columns are all text (codec.ts
 * readExpression), so a column's new type never changes a statement's result shape.
 *
 * Off (`preparedStatements: false` on the upstream) every statement is unnamed: for a
 * connection pooler that hands a session's statements to other clients (PgBouncer in
 * transaction mode before 1.21).
 */

/** Distinct statement texts named per upstream, at most. */
export const MAX_NAMED = 256;

export class StatementNames {
  private readonly names = new Map<string, string>();

  constructor(private readonly enabled: boolean) {}

  /** The name to run `text` under; undefined: run it unnamed. */
  of(text: string): string | undefined {
    if (!this.enabled) return undefined;
    let name = this.names.get(text);
    if (name === undefined && this.names.size < MAX_NAMED) {
      name = `fg${this.names.size + 1}`;
      this.names.set(text, name);
    }
    return name;
  }

  /** How many texts have a name. */
  get size(): number {
    return this.names.size;
  }
}
