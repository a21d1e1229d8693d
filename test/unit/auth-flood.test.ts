/**
 * Authentication a flood cannot stall (src/auth/authenticate.ts): keys of no form the
 * file can hold cost no KDF run, a key is tried against at most one hash, the wait for a
 * KDF run is bounded (429 auth-busy), a client is held to a few pending runs and a
 * budget of failed ones (429 auth-throttled), and a reload keeps the verified keys whose
 * hash did not change. The figures under a real flood: bench/auth-flood.mjs.
 */
import type { Socket } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  Authenticator,
  CLIENT_PENDING,
  FAILURE_BURST,
  KDF_PARALLEL,
  MAX_WAITING,
} from '../../src/auth/authenticate.js';
import { parseAuthText } from '../../src/auth/file.js';
import { generateApiKey, hashApiKey } from '../../src/auth/keys.js';
import { ProblemError } from '../../src/errors.js';

const from = (address: string) => ({ remoteAddress: address }) as unknown as Socket;
const bearer = (key: string) => `Bearer ${key}`;

let alice: { key: string; hash: string };
let bob: { key: string; hash: string };
const customs = [
  'ops.first-operator-chosen-secret-0001',
  'ci.second-operator-chosen-secret-002',
  'bk.third-operator-chosen-secret-0003',
];
let text = '';

beforeAll(async () => {
  alice = await generateApiKey();
  bob = await generateApiKey();
  const hashes = await Promise.all(customs.map((k) => hashApiKey(k)));
  text = `principals:
  - { name: alice, keys: ['${alice.hash}'], grants: [] }
  - { name: bob, keys: ['${bob.hash}'], grants: [] }
  - { name: ops, keys: [${hashes.map((h) => `'${h}'`).join(', ')}], grants: [] }
`;
}, 30_000);

/** A wrong key naming alice's hash by its salt: it costs a KDF run. */
function wrongForAlice(i: number): string {
  const secret = `${i}`.padStart(43, 'Q');
  return `${alice.key.slice(0, 26)}${secret}`;
}

async function outcome(p: Promise<unknown>): Promise<string> {
  try {
    const r = (await p) as { ok: boolean; principal?: { name: string } | null };
    return r.ok ? (r.principal?.name ?? 'nobody') : 'refused';
  } catch (err) {
    if (err instanceof ProblemError)
      return `${err.status} ${err.code} retry-after=${err.headers['retry-after']}`;
    throw err;
  }
}

describe('authentication under a flood', () => {
  it('refuses keys of no form the file can hold, and ids no hash has, without a KDF run', async () => {
    const auth = new Authenticator(parseAuthText('auth.yaml', text));
    const junk = [
      'x',
      'short',
      `fgk_${'A'.repeat(64)}`,
      'no-id-here-but-long-enough-000000',
      'zz.an-id-no-hash-has-0000000000000',
      `${(await generateApiKey()).key}`,
    ];
    for (const k of junk)
      expect(await outcome(auth.authenticate(bearer(k), from('10.0.0.1'))), k).toBe('refused');
    expect(auth.kdfRuns).toBe(0);
  });

  it('tries a key of another form against its one hash, found by its id', async () => {
    const auth = new Authenticator(parseAuthText('auth.yaml', text));
    expect(await outcome(auth.authenticate(bearer(customs[2] as string), from('10.0.0.1')))).toBe('ops');
    expect(auth.kdfRuns).toBe(1);
    expect(
      await outcome(auth.authenticate(bearer('ops.a-wrong-secret-for-the-ops-id-0000'), from('10.0.0.1'))),
    ).toBe('refused');
    expect(auth.kdfRuns).toBe(2); // one run, not one per hash the file holds
  });

  it('bounds the KDF queue: past it, 429 auth-busy with Retry-After, at once', async () => {
    const auth = new Authenticator(parseAuthText('auth.yaml', text));
    const flood = Array.from({ length: KDF_PARALLEL + MAX_WAITING + 20 }, (_, i) =>
      outcome(auth.authenticate(bearer(wrongForAlice(i)), from(`10.1.${i >> 8}.${i & 255}`))),
    );
    // A first-use key arriving now is not queued behind the flood without bound either.
    const legit = outcome(auth.authenticate(bearer(bob.key), from('10.9.9.9')));
    const results = await Promise.all(flood);
    expect(results.filter((r) => r === 'refused')).toHaveLength(KDF_PARALLEL + MAX_WAITING);
    expect(results.filter((r) => r === '429 auth-busy retry-after=1')).toHaveLength(20);
    expect(await legit).toBe('429 auth-busy retry-after=1');
    expect(auth.kdfRuns).toBe(KDF_PARALLEL + MAX_WAITING);
    // Once the flood is through, it is verified; then a full queue never refuses it.
    expect(await outcome(auth.authenticate(bearer(bob.key), from('10.9.9.9')))).toBe('bob');
    const again = Array.from({ length: KDF_PARALLEL + MAX_WAITING + 5 }, (_, i) =>
      outcome(auth.authenticate(bearer(wrongForAlice(1000 + i)), from(`10.2.${i >> 8}.${i & 255}`))),
    );
    expect(await outcome(auth.authenticate(bearer(bob.key), from('10.9.9.9')))).toBe('bob');
    await Promise.all(again);
  });

  it('holds one client to a few pending runs and a budget of failed ones', async () => {
    let now = 0;
    const auth = new Authenticator(parseAuthText('auth.yaml', text), () => now);
    const client = from('10.3.0.1');
    const burst = await Promise.all(
      Array.from({ length: CLIENT_PENDING + 3 }, (_, i) =>
        outcome(auth.authenticate(bearer(wrongForAlice(i)), client)),
      ),
    );
    expect(burst.filter((r) => r === 'refused')).toHaveLength(CLIENT_PENDING);
    expect(burst.filter((r) => r.startsWith('429 auth-throttled'))).toHaveLength(3);
    // One at a time: the budget runs out after FAILURE_BURST failed runs in all.
    for (let i = CLIENT_PENDING; i < FAILURE_BURST; i++)
      expect(await outcome(auth.authenticate(bearer(wrongForAlice(100 + i)), client))).toBe('refused');
    const runs = auth.kdfRuns;
    expect(await outcome(auth.authenticate(bearer(alice.key), client))).toBe(
      '429 auth-throttled retry-after=1',
    );
    expect(auth.kdfRuns).toBe(runs); // not looked at
    // Another client is not held back by this one; the budget comes back with time.
    expect(await outcome(auth.authenticate(bearer(bob.key), from('10.3.0.2')))).toBe('bob');
    now += 1000;
    expect(await outcome(auth.authenticate(bearer(alice.key), client))).toBe('alice');
    // Requests without a key (or with one of no form) never spend the budget.
    for (let i = 0; i < 3 * FAILURE_BURST; i++)
      expect(await outcome(auth.authenticate(bearer('x'), from('10.3.0.3')))).toBe('refused');
    expect(await outcome(auth.authenticate(bearer(bob.key), from('10.3.0.3')))).toBe('bob');
  });

  it('keeps verified keys across a reload when their hash is unchanged, and only then', async () => {
    const auth = new Authenticator(parseAuthText('auth.yaml', text));
    const c = from('10.4.0.1');
    expect(await outcome(auth.authenticate(bearer(alice.key), c))).toBe('alice');
    expect(await outcome(auth.authenticate(bearer(bob.key), c))).toBe('bob');
    const runs = auth.kdfRuns;
    auth.replace(parseAuthText('auth.yaml', text)); // SIGHUP with the same file
    expect(await outcome(auth.authenticate(bearer(alice.key), c))).toBe('alice');
    expect(await outcome(auth.authenticate(bearer(bob.key), c))).toBe('bob');
    expect(auth.kdfRuns).toBe(runs);
    // bob's key replaced: his old key is judged again (and refused); alice's stays cached.
    const rotated = await generateApiKey();
    auth.replace(parseAuthText('auth.yaml', text.replace(bob.hash, rotated.hash)));
    expect(await outcome(auth.authenticate(bearer(bob.key), c))).toBe('refused');
    expect(await outcome(auth.authenticate(bearer(alice.key), c))).toBe('alice');
    expect(auth.kdfRuns).toBe(runs);
    // alice's hash moved to another principal: not hers any more.
    auth.replace(parseAuthText('auth.yaml', text.replace('name: alice', 'name: mallory')));
    expect(await outcome(auth.authenticate(bearer(alice.key), c))).toBe('mallory');
    expect(auth.kdfRuns).toBe(runs + 1);
  });
});
