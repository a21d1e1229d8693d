/**
 * The values only Postgres can judge, asked of it: the canonical text of a URL value of
 * a type the gateway does not print itself (canonical.ts `ask`), and which column's
 * value it refused when a statement fails with SQLSTATE class 22 (a day 30 in February,
 * a malformed array, a numeric overflow), so every value error names its column. The
 * extra statements run only on those paths.
 */
import { errorCode } from '../../../store/sql/driver.js';
import { answered } from './canonical.js';
import type { Column } from './column.js';
import { invalidRow } from './refusals.js';
import { refuse, type Checked, type TypeRefusal, type UrlInput } from './row-input.js';
import * as sql from './rows-sql.js';
import type { Rows, Statement, StatementRunner } from './runner.js';

export class ValueJudge {
  constructor(private readonly runner: StatementRunner) {}

  /**
   * Values from the URL as parameters, each in its canonical text or refused (naming its
   * field): at once when the gateway judges them all (the usual key), else once Postgres
   * printed the others, asked in one statement.
   */
  urlValues(inputs: readonly UrlInput[]): Judged<string[]> | Promise<Judged<string[]>> {
    return inputs.some((u) => u.check.kind === 'ask') ? this.asked(inputs) : collect(inputs, [], []);
  }

  private async asked(inputs: readonly UrlInput[]): Promise<Judged<string[]>> {
    const asked = inputs.filter((u) => u.check.kind === 'ask');
    const text = sql.canonicalTexts(asked.map((u, i) => (u.check.kind === 'ask' ? u.check.sql(i + 1) : '')));
    let printed: (string | null)[];
    try {
      printed = (await this.runner.run({ text, values: asked.map((u) => u.raw), writes: false }))[0] ?? [];
    } catch (err) {
      const code = errorCode(err);
      if (code === undefined || !code.startsWith('22')) throw err;
      const bad = await this.firstInvalid(asked.map((u) => [u.col, u.raw]));
      const u = (asked.find((a) => a.col === bad) ?? asked[0]) as UrlInput;
      return urlRefusal(u, `not a valid ${u.col.declared}`);
    }
    return collect(inputs, asked, printed);
  }

  /**
   * A row statement's rows; a value Postgres refuses (SQLSTATE class 22: a day 30 in
   * February, a malformed array, a numeric overflow) is 400 naming its column, found by
   * casting each parameter alone (only on this path).
   */
  rows(st: Statement, params: readonly [Column, string | null][]): Promise<Judged<Rows>> {
    return this.runner.run(st).then(
      (value) => ({ ok: true, value }),
      (err: unknown) => this.refusedValue(err, params),
    );
  }

  private async refusedValue(err: unknown, params: readonly [Column, string | null][]): Promise<TypeRefusal> {
    const code = errorCode(err);
    if (code === undefined || !code.startsWith('22')) throw err;
    const col = await this.firstInvalid(params);
    const detail =
      col === undefined
        ? `the database refused a value (SQLSTATE ${code})`
        : `"${col.name}": not a valid ${col.declared} (SQLSTATE ${code})`;
    return { ok: false, problem: invalidRow(detail, col?.name), byType: true };
  }

  /**
   * The column whose value Postgres refused: the first whose value fails a cast to its
   * declared type alone, else the first the cast would cut (an array of char(n): the
   * assignment refuses what an explicit cast cuts).
   */
  async firstInvalid(params: readonly [Column, string | null][]): Promise<Column | undefined> {
    let cut: Column | undefined;
    for (const [col, text] of params) {
      if (text === null) continue;
      const value = sql.placeholder(col, 1);
      try {
        const rows = await this.runner.run({
          text: `SELECT (${value})::${col.declared}::text IS DISTINCT FROM (${value})::text`,
          values: [text],
          writes: false,
        });
        if (rows[0]?.[0] === 't') cut ??= col;
      } catch (err) {
        if (errorCode(err)?.startsWith('22') === true) return col;
        throw err;
      }
    }
    return cut;
  }
}

type Judged<T> = Checked<T> | TypeRefusal;

/** The parameters of `inputs`, those in `asked` judged by what Postgres `printed` for them. */
function collect(
  inputs: readonly UrlInput[],
  asked: readonly UrlInput[],
  printed: readonly (string | null)[],
): Judged<string[]> {
  const out: string[] = [];
  for (const u of inputs) {
    const i = asked.indexOf(u);
    const check = i < 0 ? u.check : answered(u.col, u.raw, printed[i] ?? '');
    if (check.kind !== 'ok')
      return urlRefusal(u, check.kind === 'refused' ? check.message : 'was not judged');
    out.push(check.text);
  }
  return { ok: true, value: out };
}

function urlRefusal(u: UrlInput, message: string): TypeRefusal {
  return { ...refuse(`"${u.field}": ${message}`, u.field), byType: true };
}
