#!/bin/sh
# The multi-lock soak of test/fault/multi-lock-soak.test.ts for 30 s per store (the test
# suite runs 10 s): 8 clients on random overlapping sets of 2–4 keys. Prints one JSON line
# of figures per store (acquires, grants, timeouts, violations). Needs the build (the
# kill -9 case runs the built client) and the shared Redis and Postgres of the test suite.
# Usage: scripts/multi-lock-soak.sh [seconds]
set -e
cd "$(dirname "$0")/.."
npm run build >/dev/null
FENCEGATE_SOAK_MS=$(( ${1:-30} * 1000 )) npx vitest run test/fault/multi-lock-soak.test.ts -t 'no deadlock' 2>&1 \
  | grep -E '\{"store"|Tests|FAIL|✓|×'
