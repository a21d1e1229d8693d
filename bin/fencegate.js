#!/bin/sh
":" //; s=8 g=20; case "$FENCEGATE_HEAP" in fast) s=32 g=100 ;; ''|compact) ;; *) echo "fencegate: FENCEGATE_HEAP must be fast or compact, not '$FENCEGATE_HEAP'" >&2; exit 2 ;; esac; case " $NODE_OPTIONS " in *--max-semi-space-size*) s= ;; esac; t=; case "$FENCEGATE_GC" in single) t=1 ;; parallel) ;; '') [ "$(nproc 2>/dev/null || echo 1)" -le 2 ] && t=1 ;; *) echo "fencegate: FENCEGATE_GC must be single or parallel, not '$FENCEGATE_GC'" >&2; exit 2 ;; esac; exec node ${s:+--max-semi-space-size=$s} ${g:+--heap-growing-percent=$g} --no-allocation-site-pretenuring ${t:+--single-threaded-gc} "$0" "$@"
// The two lines above are read by sh when this file is run as a program (the installed
// `fencegate` command): they start Node with
// - an 8 MiB young-generation semi-space (s) unless NODE_OPTIONS already sets one, and the
//   old generation collected once it has grown by 20 % since the last full collection (g:
//   --heap-growing-percent, which NODE_OPTIONS cannot carry) instead of at up to 4× (V8's
//   own choice): FENCEGATE_HEAP=compact, the default. The gateway stays at ~110–120 MiB
//   under fenced saturation on any store (the embedded store's ≤ 150 MB) at the same CPU
//   per request as the larger heap (ADR 0004, addendum 5).
// - FENCEGATE_HEAP=fast instead: s=32 g=100, a 32 MiB semi-space and a growth of 2×, the
//   default until the fenced path stopped promoting its requests (ADR 0004, addendum 4);
//   it holds ~160–200 MiB. Any other value stops the command with a message.
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
