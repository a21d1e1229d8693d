import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  addNextKey,
  decodeSequencer,
  initKeyFile,
  KeyRing,
  parseKeyFile,
  promoteNextKey,
  pruneRetiredKeys,
  readKeyFile,
  SequencerKeyError,
  SequencerVerifier,
  signSequencer,
  writeKeyFile,
  type SequencerClaims,
} from '../../src/sequencer/index.js';
import { formatPolicyError, loadPolicies } from '../../src/policies.js';
import { MAX_TOKEN } from '../../src/tokens.js';

let dir: string;
let file: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fg-seq-'));
  file = join(dir, 'keys.json');
  await writeKeyFile(file, initKeyFile(), { exclusive: true });
});
afterEach(() => rm(dir, { recursive: true, force: true }));

const claims = (over: Partial<Omit<SequencerClaims, 'kid'>> = {}): Omit<SequencerClaims, 'kid'> => ({
  ns: 'fencegate',
  lock: 'order:42',
  token: 42n,
  leaseId: 'lease-1',
  epoch: 'e1',
  expiresAt: Date.now() + 60_000,
  ...over,
});

/** This gateway's store: namespace fencegate, epoch e1 (a test may move it). */
const audience = { ns: 'fencegate', epochId: 'e1' as string | null, epoch: () => audience.epochId };
beforeEach(() => {
  audience.epochId = 'e1';
});

async function ringAndVerifier(now: () => number = Date.now) {
  const ring = await KeyRing.open(file);
  return { ring, verifier: new SequencerVerifier(ring, now, audience, 4) };
}

function mint(ring: KeyRing, over: Partial<SequencerClaims> = {}): string {
  return signSequencer({ kid: ring.signer.kid, ...claims(over) }, ring.signer.key);
}

describe('sequencer format', () => {
  it('round-trips every claim, the token as a bigint up to 2^63-1', async () => {
    const { ring } = await ringAndVerifier();
    const s = mint(ring, { token: MAX_TOKEN, lock: 'ünï:🔒' });
    const d = decodeSequencer(s);
    expect(d.ok && d.claims).toEqual({
      kid: ring.signer.kid,
      ...claims({ token: MAX_TOKEN, lock: 'ünï:🔒', expiresAt: d.ok ? d.claims.expiresAt : 0 }),
    });
  });

  it('refuses strings that are not a canonical sequencer', () => {
    for (const bad of ['', 'abc', 'a.b.c', 'a b.c', '42', `${'A'.repeat(5000)}.x`]) {
      expect(decodeSequencer(bad).ok).toBe(false);
    }
  });
});

describe('sequencer verification', () => {
  it('accepts a genuine sequencer for its lock, and caches it', async () => {
    const { ring, verifier } = await ringAndVerifier();
    const s = mint(ring);
    const first = await verifier.verify(s, 'order:42');
    expect(first).toMatchObject({ ok: true, claims: { token: 42n, lock: 'order:42' } });
    expect(verifier.cached).toBe(1);
    expect(await verifier.verify(s, 'order:42')).toEqual(first);
  });

  it('refuses a changed payload, a changed signature, another lock and an expired lease (also from the cache)', async () => {
    let now = Date.now();
    const { ring, verifier } = await ringAndVerifier(() => now);
    const s = mint(ring, { expiresAt: now + 1000 });
    const [p, sig] = s.split('.') as [string, string];
    const payload = JSON.parse(Buffer.from(p, 'base64url').toString()) as Record<string, unknown>;
    const raised = Buffer.from(JSON.stringify({ ...payload, token: '43' })).toString('base64url');
    expect(await verifier.verify(`${raised}.${sig}`, 'order:42')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/signature/),
    });
    const flipped = Buffer.from(sig, 'base64url');
    flipped[0] = (flipped[0] ?? 0) ^ 1;
    expect((await verifier.verify(`${p}.${flipped.toString('base64url')}`, 'order:42')).ok).toBe(false);
    expect(await verifier.verify(s, 'order:42')).toMatchObject({ ok: true });
    expect(await verifier.verify(s, 'order:43')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/order:42/),
    });
    now += 1000;
    expect(await verifier.verify(s, 'order:42')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/expired/),
    });
  });

  it('refuses a sequencer signed by a key the file does not list', async () => {
    const { verifier } = await ringAndVerifier();
    const otherDir = join(dir, 'other.json');
    await writeKeyFile(otherDir, initKeyFile(), { exclusive: true });
    const other = await KeyRing.open(otherDir);
    expect(await verifier.verify(mint(other), 'order:42')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/unknown key/),
    });
    // Same kid, other key: the signature does not verify.
    const { ring } = await ringAndVerifier();
    const forged = signSequencer({ kid: ring.signer.kid, ...claims() }, other.signer.key);
    expect(await verifier.verify(forged, 'order:42')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/signature/),
    });
  });

  it('refuses a sequencer of another store namespace or epoch, cached or not', async () => {
    const { ring, verifier } = await ringAndVerifier();
    expect(await verifier.verify(mint(ring, { ns: 'other-deployment' }), 'order:42')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/another store namespace/),
    });
    const s = mint(ring);
    expect((await verifier.verify(s, 'order:42')).ok).toBe(true); // now cached
    audience.epochId = 'e2'; // fencegate epoch bump, or the store was lost
    expect(await verifier.verify(s, 'order:42')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/another epoch/),
    });
    expect((await verifier.verify(mint(ring, { epoch: 'e2' }), 'order:42')).ok).toBe(true);
    // Version 1 (no namespace) is not a sequencer any more.
    const v1 = Buffer.from(
      JSON.stringify({
        v: 1,
        kid: ring.signer.kid,
        lock: 'order:42',
        token: '1',
        lease: 'l',
        epoch: 'e2',
        exp: 1,
      }),
    ).toString('base64url');
    expect(decodeSequencer(`${v1}.${'A'.repeat(86)}`)).toMatchObject({ ok: false });
  });

  it('keeps at most its bound of entries', async () => {
    const { ring, verifier } = await ringAndVerifier();
    for (let t = 1n; t <= 10n; t++)
      expect((await verifier.verify(mint(ring, { token: t }), 'order:42')).ok).toBe(true);
    expect(verifier.cached).toBe(4);
  });

  it('rotation: a next key is accepted before it signs; a retired key until it is pruned', async () => {
    const { ring, verifier } = await ringAndVerifier();
    const old = mint(ring);
    const oldKid = ring.signer.kid;
    const added = addNextKey(await readKeyFile(file));
    await writeKeyFile(file, added.file);
    await ring.reload();
    expect(ring.signer.kid).toBe(oldKid);
    expect(ring.jwks().keys.map((k) => k.kid)).toEqual([oldKid, added.kid]);

    const promoted = promoteNextKey(added.file);
    expect(promoted).toMatchObject({ kid: added.kid, retired: oldKid });
    await writeKeyFile(file, promoted.file);
    await ring.reload();
    expect(ring.signer.kid).toBe(added.kid);
    const fresh = mint(ring);
    expect((await verifier.verify(old, 'order:42')).ok).toBe(true);
    expect((await verifier.verify(fresh, 'order:42')).ok).toBe(true);

    const pruned = pruneRetiredKeys(promoted.file, 0);
    expect(pruned.removed).toEqual([oldKid]);
    await writeKeyFile(file, pruned.file);
    await ring.reload();
    // Cached before, refused now: the key is gone.
    expect(await verifier.verify(old, 'order:42')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/unknown key/),
    });
    expect((await verifier.verify(fresh, 'order:42')).ok).toBe(true);
  });

  it('a gateway learns a key promoted elsewhere by re-reading the file on an unknown kid, rate-limited', async () => {
    const issuerRing = await KeyRing.open(file);
    const gatewayRing = await KeyRing.open(file, { refreshIntervalMs: 60_000 });
    const verifier = new SequencerVerifier(gatewayRing, Date.now, audience);
    const rotated = promoteNextKey(addNextKey(await readKeyFile(file)).file).file;
    await writeKeyFile(file, rotated);
    await issuerRing.reload();
    expect((await verifier.verify(mint(issuerRing), 'order:42')).ok).toBe(true);
    // A second unknown kid within the interval does not read the file again.
    const rotatedAgain = promoteNextKey(addNextKey(rotated).file).file;
    await writeKeyFile(file, rotatedAgain);
    await issuerRing.reload();
    expect(await verifier.verify(mint(issuerRing), 'order:42')).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/unknown key/),
    });
  });
});

describe('key file', () => {
  it('is refused when group or others may read it, unless allowed (then warned about)', async () => {
    await chmod(file, 0o644);
    await expect(KeyRing.open(file)).rejects.toThrow(/readable by group or others \(mode 0644\).*chmod 600/);
    const warnings: string[] = [];
    const ring = await KeyRing.open(file, { allowReadable: true, onWarning: (w) => warnings.push(w) });
    expect(ring.signer.kid).toMatch(/./);
    expect(warnings).toEqual([expect.stringMatching(/mode 0644/)]);
    // A reload of a file made readable meanwhile keeps the last good keys.
    await chmod(file, 0o600);
    const strict = await KeyRing.open(file, { onError: (e) => warnings.push(String(e)) });
    await chmod(file, 0o640);
    expect(await strict.reload()).toBe(false);
    expect(warnings.at(-1)).toMatch(/mode 0640/);
  });

  it('is written readable by its owner only, and never twice by init', async () => {
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    await expect(writeKeyFile(file, initKeyFile(), { exclusive: true })).rejects.toMatchObject({
      code: 'EEXIST',
    });
  });

  it('publishes public keys only', async () => {
    const ring = await KeyRing.open(file);
    const jwks = ring.jwks();
    expect(jwks.keys).toHaveLength(1);
    expect(jwks.keys[0]).toEqual({
      kty: 'OKP',
      crv: 'Ed25519',
      kid: ring.signer.kid,
      x: expect.any(String),
      use: 'sig',
      alg: 'EdDSA',
    });
    expect(JSON.stringify(jwks)).not.toContain(JSON.parse(await readFile(file, 'utf8')).keys[0].d);
  });

  it('refuses invalid files without quoting their content', async () => {
    const good = await readKeyFile(file);
    const entry = good.keys[0]!;
    const cases: [unknown, RegExp][] = [
      [{ version: 2, keys: good.keys }, /version/],
      [{ version: 1, keys: [] }, /non-empty/],
      [{ version: 1, keys: [{ ...entry, state: 'next' }] }, /exactly one key/],
      [{ version: 1, keys: [entry, { ...entry }] }, /twice/],
      [{ version: 1, keys: [{ ...entry, d: initKeyFile().keys[0]!.d }] }, /not the private key/],
      [{ version: 1, keys: [{ ...entry, extra: 1 }] }, /unknown field/],
    ];
    for (const [data, message] of cases) {
      let thrown: unknown;
      try {
        parseKeyFile(data, 'keys.json');
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(SequencerKeyError);
      expect((thrown as Error).message).toMatch(message);
      expect((thrown as Error).message).not.toContain(entry.d);
    }
    await writeFile(file, `{"version":1,"keys":[{"d":"${entry.d}"`);
    await expect(readKeyFile(file)).rejects.toThrow(/not valid JSON/);
    await expect(readKeyFile(file)).rejects.not.toThrow(entry.d!);
  });

  it('a reload that fails keeps the last good keys', async () => {
    const errors: unknown[] = [];
    const ring = await KeyRing.open(file, { onError: (e) => errors.push(e) });
    const kid = ring.signer.kid;
    await writeFile(file, 'garbage');
    expect(await ring.reload()).toBe(false);
    expect(errors).toHaveLength(1);
    expect(ring.signer.kid).toBe(kid);
  });
});

describe('policy: check: sequencer', () => {
  const load = async (kind: string, url: string, extra = '') => {
    const path = join(dir, 'policy.yaml');
    await writeFile(
      path,
      `version: 1
upstreams:
  up: { kind: ${kind}, url: '${url}' }
routes:
  - name: writes
    methods: [PUT]
    path: /things/:id
    upstream: up
    lock: 'thing:{id}'
${extra}    fencing: { check: sequencer }
`,
    );
    return loadPolicies(path);
  };

  it('loads on http and postgres routes', async () => {
    const http = await load('http', 'http://127.0.0.1:9000');
    expect(http.ok && http.policy.routes[0]?.fencing?.check).toBe('sequencer');
    const pg = await load(
      'postgres',
      'postgres://u@127.0.0.1/db',
      '    table: things\n    key: id\n    columns: [a]\n',
    );
    expect(pg.ok && pg.policy.routes[0]?.fencing?.check).toBe('sequencer');
  });

  it('is refused on s3 routes, naming the field and why', async () => {
    const r = await load('s3', 'http://127.0.0.1:9000');
    expect(r.ok).toBe(false);
    const lines = r.ok ? [] : r.errors.map(formatPolicyError);
    expect(lines.join('\n')).toMatch(/routes\[0\]\.fencing\.check: an s3 route cannot use "sequencer"/);
  });
});
