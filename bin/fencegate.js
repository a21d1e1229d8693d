#!/bin/sh
":" //; case " $NODE_OPTIONS " in *--max-semi-space-size*) exec node "$0" "$@" ;; *) exec node --max-semi-space-size=32 "$0" "$@" ;; esac
// The two lines above are read by sh when this file is run as a program (the installed
// `fencegate` command): they start Node with a 32 MiB young-generation semi-space unless
// NODE_OPTIONS already sets one. With Node's default (16 MiB) the fenced request path
// promotes short-lived objects that wait on the store to the old generation; the larger
// semi-space cut the gateway's CPU per fenced write by ~20 % (docs/gateway.md,
// "Performance"). For Node, line 2 is a string and a comment. `node bin/fencegate.js`
// skips them and runs with Node's defaults.
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
