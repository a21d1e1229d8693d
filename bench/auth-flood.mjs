// The legitimate first-use key under a flood of bad keys (docs/security.md, "API keys"):
// `node bench/auth-flood.mjs [--bin PATH/bin/fencegate.js]` starts `fencegate serve` with an
// auth file of five principals, fires 300 concurrent requests with bad keys, and 50 ms
// later one request with a key never used before; it prints how long that request took
// and what it got, for three floods, each on a fresh process (no cached verdicts):
//   junk   300 keys of no form the file can hold ("Bearer x-17")            one client
//   wrong  300 wrong secrets under a real key's salt (a KDF run each)       one client
//   spread the same as wrong, each from its own address (127.0.1.x)        300 clients
// The legitimate key comes from an address of its own. --bin runs another build (the
// before figures: a checkout of an earlier commit, built). Prints figures; asserts nothing.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { LISTENING, serveArgs, spawnUntil } from './lib.mjs';

const { values } = parseArgs({ options: { bin: { type: 'string' }, flood: { type: 'string' } } });
const bin = resolve(values.bin ?? 'bin/fencegate.js');
const root = dirname(dirname(bin));
const { generateApiKey } = await import(pathToFileURL(join(root, 'dist/auth/keys.js')).href);
const FLOOD = 300;

/** One GET /v1/locks with `key`, from `localAddress`; resolves with status, ms and Retry-After. */
function get(url, key, localAddress) {
  const started = performance.now();
  return new Promise((done) => {
    const req = http.request(
      `${url}/v1/locks`,
      { headers: { authorization: `Bearer ${key}` }, agent: false, localAddress },
      (res) => {
        res.resume();
        res.on('end', () =>
          done({
            status: res.statusCode,
            ms: performance.now() - started,
            retryAfter: res.headers['retry-after'],
          }),
        );
      },
    );
    req.on('error', (err) => done({ status: `error ${err.code}`, ms: performance.now() - started }));
    req.end();
  });
}

async function scenario(name, keys) {
  const dir = await mkdtemp(join(tmpdir(), 'fg-auth-flood-'));
  const children = [];
  try {
    const principals = await Promise.all(Array.from({ length: 5 }, () => generateApiKey()));
    await writeFile(
      join(dir, 'auth.yaml'),
      `principals:\n${principals
        .map((p, i) => `  - { name: p${i}, keys: ['${p.hash}'], grants: [{ verbs: [read], prefix: '*' }] }\n`)
        .join('')}`,
    );
    const { m } = await spawnUntil(
      process.execPath,
      [bin, ...serveArgs(join(dir, 'store'), './policies', ['--auth', join(dir, 'auth.yaml')])], // cwd has no policies: the issuer alone
      LISTENING,
      { children, cwd: dir, timeoutMs: 180_000 },
    );
    const url = m[2];
    const salt = principals[0].key.slice(4, 26);
    const bad = Array.from({ length: FLOOD }, (_, i) =>
      keys === 'junk' ? `x-${i}` : `fgk_${salt}${randomBytes(32).toString('base64url')}`,
    );
    const from = (i) =>
      name === 'spread' ? `127.0.${1 + Math.floor(i / 250)}.${1 + (i % 250)}` : '127.0.0.2';
    const t0 = performance.now();
    const flood = bad.map((k, i) => get(url, k, from(i)));
    await new Promise((r) => setTimeout(r, 50));
    const legit = await get(url, principals[4].key, '127.0.0.1');
    // A client told to retry does, after Retry-After, until it is answered: the time to its 200.
    let answered = legit;
    let tries = 1;
    while (answered.status === 429 || answered.status === 503) {
      await new Promise((r) => setTimeout(r, Number(answered.retryAfter ?? 1) * 1000));
      answered = await get(url, principals[4].key, '127.0.0.1');
      tries += 1;
    }
    const okAfterMs = performance.now() - t0 - 50;
    const done = await Promise.all(flood);
    const counts = {};
    for (const r of done) counts[r.status] = (counts[r.status] ?? 0) + 1;
    return {
      flood: name,
      legitFirstAnswerMs: Math.round(legit.ms),
      legitFirstStatus: legit.status,
      legitOkAfterMs: Math.round(okAfterMs),
      legitTries: tries,
      floodAnsweredMs: Math.round(Math.max(...done.map((r) => r.ms))),
      floodStatuses: counts,
    };
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await rm(dir, { recursive: true, force: true });
  }
}

const which = values.flood ? values.flood.split(',') : ['junk', 'wrong', 'spread'];
console.log(`fencegate ${bin}`);
for (const name of which) {
  const r = await scenario(name, name === 'junk' ? 'junk' : 'wrong');
  console.log(JSON.stringify(r));
}
