/**
 * wrk as the benchmarks' closed-loop load generator (saturation rows), as issue 13 measured:
 * `wrk -t2 -c32`, the PUT of bench/wrk-put.lua (each lock's Fencing-Token, statuses checked in
 * its `response` callback). wrk is a separate C process, so it neither shares the bench's
 * event loop nor its heap, and its CPU per request is small and measured (the shell that runs
 * it prints its children's utime + stime from /proc once wrk has exited).
 *
 * Needs the `wrk` command (Debian/Ubuntu: `apt-get install wrk`; 4.x, with LuaJIT).
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const SCRIPT = fileURLToPath(new URL('./wrk-put.lua', import.meta.url));
/** Clock ticks per second of /proc/<pid>/stat's times (USER_HZ; 100 on Linux). */
const TICK_US = 1e6 / 100;

/** Throws with what to install when `wrk` is not on the PATH. */
export function requireWrk() {
  const probe = spawnSync('wrk', ['-v'], { encoding: 'utf8' });
  if (probe.error || !/wrk/.test(`${probe.stdout}${probe.stderr}`)) {
    throw new Error(
      'the benchmarks need wrk (the HTTP load generator) on the PATH: apt-get install wrk ' +
        `(${probe.error?.message ?? 'no version line from wrk -v'})`,
    );
  }
}

/**
 * One wrk run: PUT /{base}/{i} over `locks` ids for `seconds`. `expect` is the status that
 * counts as answered well (default: any 2xx). Returns
 * { requests, rps, ok, bad, p50, p99, max (ms), errors, cpuUs: wrk's own utime + stime }.
 */
export async function wrk(
  url,
  {
    base = 'orders',
    tokens = null,
    sequencers = null,
    seconds,
    connections = 32,
    threads = 2,
    locks = 16,
    expect = 0,
  },
) {
  const args = [
    '-t',
    String(threads),
    '-c',
    String(connections),
    '-d',
    `${seconds}s`,
    '--timeout',
    '10s',
    '-s',
    SCRIPT,
    url,
  ];
  // sh waits for wrk, then its own /proc stat holds wrk's CPU in cutime and cstime.
  const child = spawn(
    'sh',
    ['-c', 'wrk "$@"; s=$?; echo "stat $(cat /proc/$$/stat)"; exit $s', 'sh', ...args],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        WRK_BASE: base,
        WRK_LOCKS: String(locks),
        WRK_TOKENS: tokens ? tokens.join(',') : '',
        WRK_SEQUENCERS: sequencers ? sequencers.join(',') : '',
        WRK_EXPECT: String(expect),
      },
    },
  );
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  const [code] = await once(child, 'exit');
  const json = /^wrk-json (.*)$/m.exec(out);
  const stat = /^stat (.*)$/m.exec(out);
  if (code !== 0 || !json || !stat) throw new Error(`wrk ${args.join(' ')} failed (exit ${code}):\n${out}`);
  const r = JSON.parse(json[1]);
  const f = stat[1].slice(stat[1].lastIndexOf(')') + 2).split(' ');
  const errors = r.connect + r.read + r.write + r.timeout;
  return {
    requests: r.requests,
    rps: r.requests / (r.durationUs / 1e6),
    ok: r.ok,
    // Answers with another status, and requests that got no answer (socket errors, timeouts).
    bad: r.bad + errors,
    lastBadStatus: r.lastBadStatus,
    errors,
    p50: r.p50Us / 1000,
    p99: r.p99Us / 1000,
    max: r.maxUs / 1000,
    cpuUs: (Number(f[13]) + Number(f[14])) * TICK_US,
  };
}
