/**
 * lib.lua, run inside the real Redis Lua interpreter: decimal-string token arithmetic
 * and comparison at the edges where doubles fail (2^53 ± 1, 2^63 − 1, long carries),
 * plus a static check that the scripts call tonumber only on times and counts.
 */
import { readdirSync, readFileSync } from 'node:fs';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { libSource, SCRIPTS, scriptSource } from '../../src/store/redis/scripts.js';
import { MAX_TOKEN } from '../../src/tokens.js';
import { SHARED_REDIS_URL } from '../helpers/redis-fixture.js';

let redis: Redis;
beforeAll(async () => {
  redis = new Redis(SHARED_REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
});
afterAll(() => redis.disconnect());

/** Evaluates lib.lua followed by `body` (no KEYS), with ARGV. */
async function lua(body: string, ...argv: string[]): Promise<unknown> {
  return redis.eval(`${libSource()}\n${body}`, 0, ...argv);
}

/** fg_incr over every ARGV, in one round trip; 'nil' marks an overflow. */
async function incr(values: string[]): Promise<string[]> {
  const out = await lua(
    `local r = {}
     for i, v in ipairs(ARGV) do r[i] = fg_incr(v) or 'nil' end
     return r`,
    ...values,
  );
  return out as string[];
}

/** fg_cmp over ARGV pairs (a1, b1, a2, b2, …): '-1' | '0' | '1'. */
async function cmp(pairs: [string, string][]): Promise<number[]> {
  const out = (await lua(
    `local r = {}
     for i = 1, #ARGV, 2 do r[#r + 1] = tostring(fg_cmp(ARGV[i], ARGV[i + 1])) end
     return r`,
    ...pairs.flat(),
  )) as string[];
  return out.map(Number);
}

const P53 = 2n ** 53n;

describe('lib.lua token arithmetic', () => {
  it('adds one exactly, with carries, at and above 2^53', async () => {
    const cases: [bigint, string][] = [
      [0n, '1'],
      [1n, '2'],
      [9n, '10'],
      [1299n, '1300'],
      [999999999999999999n, '1000000000000000000'],
      [P53 - 1n, P53.toString()],
      [P53, (P53 + 1n).toString()], // 2^53 + 1 has no double
      [P53 + 1n, (P53 + 2n).toString()],
      [MAX_TOKEN - 1n, MAX_TOKEN.toString()],
      [8999999999999999999n, '9000000000000000000'],
    ];
    expect(await incr(cases.map(([n]) => n.toString()))).toEqual(cases.map(([, s]) => s));
  });

  it('refuses to pass 2^63 - 1', async () => {
    expect(await incr([MAX_TOKEN.toString(), '9999999999999999999'])).toEqual(['nil', 'nil']);
  });

  it('compares by value, also where doubles are equal', async () => {
    const pairs: [string, string][] = [
      ['1', '2'],
      ['10', '9'],
      ['9007199254740993', '9007199254740992'], // equal as doubles
      ['9007199254740992', '9007199254740993'],
      [MAX_TOKEN.toString(), (MAX_TOKEN - 1n).toString()],
      [MAX_TOKEN.toString(), MAX_TOKEN.toString()],
      ['0', '1'],
      ['1000000000000000000', '999999999999999999'],
      // Leading zeros (never stored, but never misordered either).
      ['007', '10'],
      ['0010', '9'],
      ['000', '0'],
      ['0', '00'],
      ['0999', '1000'],
    ];
    expect(await cmp(pairs)).toEqual([-1, 1, 1, -1, 1, 0, -1, 1, -1, 1, 0, 0, -1]);
  });

  it('agrees with bigint on random tokens (property)', async () => {
    const token = fc.bigInt({ min: 0n, max: MAX_TOKEN - 1n });
    const samples = fc.sample(fc.tuple(token, token), 400);
    const got = await cmp(samples.map(([a, b]) => [a.toString(), b.toString()]));
    expect(got).toEqual(samples.map(([a, b]) => (a < b ? -1 : a > b ? 1 : 0)));
    // The same pairs, each side zero-padded to 19 digits: the same order.
    const padded = await cmp(
      samples.map(([a, b]) => [a.toString().padStart(19, '0'), b.toString().padStart(19, '0')]),
    );
    expect(padded).toEqual(got);
    const incs = await incr(samples.map(([a]) => a.toString()));
    expect(incs).toEqual(samples.map(([a]) => (a + 1n).toString()));
  });

  it('recognises canonical tokens only', async () => {
    const inputs = [
      '1',
      MAX_TOKEN.toString(),
      '',
      '0',
      '01',
      '-1',
      '+1',
      '1e5',
      ' 1',
      (MAX_TOKEN + 1n).toString(),
    ];
    const out = (await lua(
      `local r = {}
       for i, v in ipairs(ARGV) do r[i] = fg_is_token(v) and 'y' or 'n' end
       return r`,
      ...inputs,
    )) as string[];
    expect(out).toEqual(['y', 'y', 'n', 'n', 'n', 'n', 'n', 'n', 'n', 'n']);
  });

  it('takes the maximum as a string', async () => {
    expect(
      await lua(
        `return { fg_max(ARGV[1], ARGV[2]), fg_max(ARGV[2], ARGV[1]) }`,
        '9007199254740993',
        '9007199254740992',
      ),
    ).toEqual(['9007199254740993', '9007199254740993']);
  });

  it('formats clock values without exponent, and derives floors as ms * 1000', async () => {
    const [big, floor, nowMs] = (await lua(
      `local now = fg_now()
       return { fg_int(1700000000000000), fg_floor_of(1712345678901), fg_int(now) }`,
    )) as string[];
    expect(big).toBe('1700000000000000');
    expect(floor).toBe('1712345678901000');
    const [sec] = await redis.time();
    expect(Math.abs(Number(nowMs) - Number(sec) * 1000)).toBeLessThan(2000);
  });
});

describe('the scripts', () => {
  it('every script compiles, and lib + script is what is registered', async () => {
    for (const name of Object.keys(SCRIPTS) as (keyof typeof SCRIPTS)[]) {
      const sha = await redis.script('LOAD', scriptSource(name));
      expect(sha).toMatch(/^[0-9a-f]{40}$/);
    }
  });

  it('start with a header naming every KEYS and ARGV they use', () => {
    for (const [file] of Object.values(SCRIPTS)) {
      const src = readFileSync(new URL(`../../src/store/redis/scripts/${file}`, import.meta.url), 'utf8');
      const header = src
        .split('\n')
        .filter((l) => l.startsWith('--'))
        .join('\n');
      for (const m of src.matchAll(/(KEYS|ARGV)\[(\d+)\]/g)) {
        expect(header, `${file} header documents ${m[0]}`).toContain(`-- ${m[1]}[${m[2]}]`);
      }
      expect(header, `${file} documents its return values`).toMatch(/-- Returns/);
    }
  });

  it('call tonumber only on times, TTLs and scores, never on tokens', () => {
    // Every tonumber argument in the scripts, reviewed: none of them holds a token.
    const allowed = new Map([
      ['t[1]', 'TIME seconds'],
      ['t[2]', 'TIME microseconds'],
      ['flat[i + 1]', 'waiter deadline (ms)'],
      ['beat', 'gateway session beat counter'],
      ['lease[2]', 'lease expiresAt (ms)'],
      ['lease[4]', 'lease expiresAt (ms)'],
      ['cur[4]', 'lease expiresAt (ms)'],
      ['ttlMs', 'lease TTL (ms)'],
      [
        'ARGV[2]',
        'waitMs (enqueue_waiter.lua); the number of locks (fence_batch.lua); a delivery bound in ms (drop_inflight.lua)',
      ],
      ['e[4]', "an in-flight entry's delivery bound (ms)"],
      ['ARGV[j + 1]', 'a lock position in the batch (fence_batch.lua)'],
      ['ARGV[i + 1]', 'a lock position in the batch (fence_batch.lua)'],
      ['ARGV[8]', 'grants remembered in the owners field (a count)'],
      ['tail[2]', 'queue position (zset score)'],
    ]);
    const dir = new URL('../../src/store/redis/scripts/', import.meta.url);
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.lua'))) {
      const src = readFileSync(new URL(file, dir), 'utf8');
      for (const m of src.matchAll(/tonumber\(([^()]*)\)/g)) {
        expect(allowed.has(m[1] ?? ''), `${file}: tonumber(${m[1]})`).toBe(true);
      }
    }
  });
});
