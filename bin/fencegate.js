#!/usr/bin/env node
import { main } from '../dist/cli.js';

main(process.argv.slice(2)).then(
  (code) => {
    if (typeof code === 'number') process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`fencegate: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
