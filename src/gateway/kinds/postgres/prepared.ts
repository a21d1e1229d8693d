/**
 * Names for the postgres kind's statements, so each pooled connection parses and plans a
 * statement once and then only binds and executes it (node-postgres prepares a named
 * query on a connection the first time that connection runs it). A fenced write is one
 * statement with two upserts in CTEs: unnamed, Postgres parsed and planned it on every
 * write, about half of the database's CPU per write (docs/postgres.md, "Performance").
 *
 * Names are given per distinct text and table generation (catalog.ts), in order (`fg1`,
 * `fg2`, …), so two texts never share one. The texts a route can produce are bounded by
 * its columns, but a PATCH names any subset of them: past MAX_NAMED texts, new ones run
 * unnamed (parsed each time), so neither side's memory grows without bound.
 *
 * A statement's result carries the table's columns as they are, so when a column's type
 * changes, Postgres refuses to run a statement prepared before (SQLSTATE 0A000, "cached
 * plan must not change result type") instead of running it with stale casts; the
 * catalog is read again, and the next generation's statements get new names
 * (runner.ts).
 *
 * Off (`preparedStatements: false` on the upstream) every statement is unnamed: for a
 * connection pooler that hands a session's statements to other clients (PgBouncer in
 * transaction mode before 1.21).
 */

/** Distinct statement texts named per upstream, at most. */
export const MAX_NAMED = 256;

export class StatementNames {
  /** Per table generation, the name of each text. */
  private readonly names = new Map<number, Map<string, string>>();
  private count = 0;

  constructor(private readonly enabled: boolean) {}

  /** The name to run `text` under for a table of `generation`; undefined: run it unnamed. */
  of(text: string, generation: number): string | undefined {
    if (!this.enabled) return undefined;
    const texts = this.names.get(generation);
    const name = texts?.get(text);
    if (name !== undefined || this.count >= MAX_NAMED) return name;
    const given = `fg${++this.count}`;
    if (texts === undefined) this.names.set(generation, new Map([[text, given]]));
    else texts.set(text, given);
    return given;
  }

  /** How many texts have a name. */
  get size(): number {
    return this.count;
  }
}
