/**
 * Loads statements.sql (copied next to the compiled JS by the build) and binds the
 * fence schema's name into it.
 */
import { readFileSync } from 'node:fs';
import { quoteIdent } from '../../../store/sql/driver.js';
import { parseNamed } from '../../../store/sql/queries.js';

const NAMES = ['fence_table', 'fence_ddl_lock', 'fence_ddl', 'fence_highest', 'table_columns'] as const;

export type StatementName = (typeof NAMES)[number];
export type Statements = Readonly<Record<StatementName, string>>;

const PARSED = parseNamed(readFileSync(new URL('./statements.sql', import.meta.url), 'utf8'));
for (const name of NAMES) {
  if (!PARSED.has(name)) throw new Error(`statements.sql has no statement named ${name}`);
}

export function statementsFor(fenceSchema: string): Statements {
  const out = {} as Record<StatementName, string>;
  for (const name of NAMES) {
    out[name] = (PARSED.get(name) as string).replaceAll('{fences}', quoteIdent(fenceSchema));
  }
  return Object.freeze(out);
}
