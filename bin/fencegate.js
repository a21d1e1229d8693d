#!/bin/sh
":" //; s=32 g=100; case "$FENCEGATE_HEAP" in compact) s=8 g=20 ;; ''|fast) ;; *) echo "fencegate: FENCEGATE_HEAP must be fast or compact, not '$FENCEGATE_HEAP'" >&2; exit 2 ;; esac; case " $NODE_OPTIONS " in *--max-semi-space-size*) s= ;; esac; t=; case "$FENCEGATE_GC" in single) t=1 ;; parallel) ;; '') [ "$(nproc 2>/dev/null || echo 1)" -le 2 ] && t=1 ;; *) echo "fencegate: FENCEGATE_GC must be single or parallel, not '$FENCEGATE_GC'" >&2; exit 2 ;; esac; exec node ${s:+--max-semi-space-size=$s} ${g:+--heap-growing-percent=$g} --no-allocation-site-pretenuring ${t:+--single-threaded-gc} "$0" "$@"
// The two lines above are read by sh when this file is run as a program (the installed
// `fencegate` command): they start Node with
// - a 32 MiB young-generation semi-space (s) unless NODE_OPTIONS already sets one. With
//   Node's default (16 MiB) the fenced request path promotes short-lived objects that wait
//   on the store to the old generation; 32 cut the gateway's CPU per fenced write by ~20 %
//   at first, ~5 % since the Redis fence batches (ADR 0004).
// - FENCEGATE_HEAP=compact instead: s=8 g=20, for the embedded store well within 150 MB
//   under load (119–126 MiB), at ~0–25 % more CPU per fenced write (ADR 0004, addenda 1
//   and 3); `fast` (the default) is s=32 g=100. Any other value stops the command with a
//   message.
// - an old-generation growth factor of 2 (g: --heap-growing-percent, which NODE_OPTIONS
//   cannot carry): the old generation is collected once it has doubled since the last
//   full collection, instead of at up to 4× (V8's own choice), so the resident memory
//   no longer saws between ~25 and ~90 MiB of old space under load (ADR 0004, addendum).
// - the garbage collector on the main thread alone (t: --single-threaded-gc) when the
//   process may use at most 2 CPUs (nproc), or with FENCEGATE_GC=single; FENCEGATE_GC=parallel
//   keeps V8's helper threads. On 2 cores shared with the store, the upstream and the
//   clients, the helpers cost more CPU than they save: single-threaded, the gateway used
//   7–25 % less CPU per request, at equal or higher throughput (ADR 0004, addendum 2).
// - no allocation-site pretenuring (always): V8 otherwise learns to allocate some of a
//   request's objects straight in the old generation; dead there until the next full
//   collection, they keep the rest of their request alive through every young collection,
//   so each scavenge copied ~4.5 MB and promoted it. Without it: ~0.5 MB, main-thread GC
//   pauses per 1 000 requests 30 → 5 ms unfenced and 16 → 6 ms fenced (ADR 0004, addendum 3).
// For Node, line 2 is a string and a comment. `node bin/fencegate.js` skips them and runs
// with Node's defaults.
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
