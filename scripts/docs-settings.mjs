// Writes the settings table of docs/operations.md (between its settings:begin and
// settings:end markers) from the table in src/settings.ts, as built in dist/ (`npm run
// docs:settings` builds first), and formats the file as prettier does. With --check it
// writes nothing and exits 1 when the file differs (test/unit/config-settings.test.ts
// holds the docs to the table in the test suite).
import { readFileSync, writeFileSync } from 'node:fs';
import prettier from 'prettier';
import { DOCS_BEGIN, DOCS_END, docsTable } from '../dist/settings.js';

const file = 'docs/operations.md';
const text = readFileSync(file, 'utf8');
const begin = text.indexOf(DOCS_BEGIN);
const end = text.indexOf(DOCS_END);
if (begin < 0 || end < begin) {
  process.stderr.write(`${file}: no "${DOCS_BEGIN}" … "${DOCS_END}" markers\n`);
  process.exit(1);
}
const spliced = `${text.slice(0, begin + DOCS_BEGIN.length)}\n\n${docsTable()}\n${text.slice(end)}`;
const options = (await prettier.resolveConfig(file)) ?? {};
const formatted = await prettier.format(spliced, { ...options, filepath: file });
if (process.argv.includes('--check')) {
  if (formatted !== text) {
    process.stderr.write(
      `${file}: the settings table differs from src/settings.ts; run npm run docs:settings\n`,
    );
    process.exit(1);
  }
} else if (formatted !== text) {
  writeFileSync(file, formatted);
  process.stdout.write(`${file}: settings table written\n`);
} else {
  process.stdout.write(`${file}: settings table up to date\n`);
}
