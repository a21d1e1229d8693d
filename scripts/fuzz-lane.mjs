#!/usr/bin/env node
// The refusal lane's fuzz (test/integration/refusal-lane-fuzz.test.ts), run for longer than
// `npm test` runs it: `npm run fuzz:lane -- --seconds 300`, or one seed: `-- --seed 1234`.
// See docs/fuzzing.md.
import { spawnSync } from 'node:child_process';

const args = process.argv.slice(2);
const value = (name) => {
  const at = args.indexOf(name);
  return at < 0 ? undefined : args[at + 1];
};
const seconds = value('--seconds') ?? '120';
const seed = value('--seed');
if (!/^[0-9]+$/.test(seconds) || (seed !== undefined && !/^[0-9]+$/.test(seed))) {
  console.error('usage: npm run fuzz:lane -- [--seconds N] [--seed SEED]');
  process.exit(2);
}
const env = { ...process.env, LANE_FUZZ_SECONDS: seconds };
if (seed !== undefined) env.LANE_FUZZ_SEED = seed;
const run = spawnSync('npx', ['vitest', 'run', 'test/integration/refusal-lane-fuzz.test.ts'], {
  env,
  stdio: 'inherit',
});
process.exit(run.status ?? 1);
