/**
 * API keys (src/auth/keys.ts) and their verification with the cache
 * (src/auth/authenticate.ts): generated keys verify, wrong ones do not, the stored
 * form is parsed strictly, and the comparison is timingSafeEqual over the whole hash
 * (asserted by behaviour: a hash that differs in its first byte and one that differs in
 * its last are both compared in full, not by timing).
 */
import { Socket } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';

const compared = vi.hoisted(() => ({ calls: [] as [Buffer, Buffer][] }));
vi.mock('node:crypto', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:crypto')>();
  return {
    ...real,
    timingSafeEqual: (a: NodeJS.ArrayBufferView, b: NodeJS.ArrayBufferView) => {
      compared.calls.push([Buffer.from(a as Buffer), Buffer.from(b as Buffer)]);
      return real.timingSafeEqual(a, b);
    },
  };
});

const { generateApiKey, hashApiKey, parseKeyHash, saltOf, verifyApiKey, KEY_PREFIX } =
  await import('../../src/auth/keys.js');
const { Authenticator } = await import('../../src/auth/authenticate.js');
const { peerCertificate } = await import('../../src/http/tls.js');
const { parseAuthText } = await import('../../src/auth/file.js');

afterEach(() => {
  compared.calls.length = 0;
});

function flip(hashText: string, at: 'first' | 'last'): string {
  const parts = hashText.split('$');
  const h = Buffer.from(parts[5] as string, 'base64url');
  const i = at === 'first' ? 0 : h.length - 1;
  h[i] = (h[i] as number) ^ 0x01;
  parts[5] = h.toString('base64url');
  return parts.join('$');
}

describe('API keys', () => {
  it('a generated key verifies against its hash, carries its salt, and another key does not', async () => {
    const { key, hash } = await generateApiKey();
    expect(key.startsWith(KEY_PREFIX)).toBe(true);
    expect(key).toHaveLength(4 + 22 + 43);
    expect(hash).toMatch(/^scrypt\$16384\$8\$1\$[A-Za-z0-9_-]{22}\$[A-Za-z0-9_-]{43}$/);
    const parsed = parseKeyHash(hash);
    if (typeof parsed === 'string') throw new Error(parsed);
    expect(saltOf(key)).toBe(parsed.saltText);
    expect(await verifyApiKey(key, parsed)).toBe(true);
    const other = await generateApiKey();
    expect(await verifyApiKey(other.key, parsed)).toBe(false);
    // Hashing a generated key again gives the same stored form (its salt is in the key).
    expect(await hashApiKey(key)).toBe(hash);
  });

  it('a key of another form gets a random salt, and verifies', async () => {
    const key = 'horse.correct-horse-battery-staple-0123456789';
    const a = await hashApiKey(key);
    const b = await hashApiKey(key);
    expect(a).not.toBe(b);
    for (const h of [a, b]) {
      const parsed = parseKeyHash(h);
      if (typeof parsed === 'string') throw new Error(parsed);
      expect(await verifyApiKey(key, parsed)).toBe(true);
      expect(await verifyApiKey(`${key}x`, parsed)).toBe(false);
    }
    await expect(hashApiKey('id.short')).rejects.toThrow(/at least 24 characters/);
    // Without an id no hash could be found for it without trying every one: refused.
    await expect(hashApiKey('correct-horse-battery-staple-0123456789')).rejects.toThrow(/<id>\.<secret>/);
    expect(a.split('$')[6]).toBe('horse');
    await expect(hashApiKey('has a space in it, which is not ok')).rejects.toThrow(/printable ASCII/);
  });

  it('compares the whole derived hash with timingSafeEqual, wherever it differs', async () => {
    const { key, hash } = await generateApiKey();
    for (const at of ['first', 'last'] as const) {
      compared.calls.length = 0;
      const parsed = parseKeyHash(flip(hash, at));
      if (typeof parsed === 'string') throw new Error(parsed);
      expect(await verifyApiKey(key, parsed)).toBe(false);
      expect(compared.calls).toHaveLength(1);
      const [derived, stored] = compared.calls[0] as [Buffer, Buffer];
      expect(derived.length).toBe(32);
      expect(stored.equals(parsed.hash)).toBe(true);
    }
  });

  it('refuses stored forms it cannot trust, saying why', () => {
    const good = 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
    expect(typeof parseKeyHash(good)).toBe('object');
    expect(parseKeyHash('plain-text-key')).toMatch(/scrypt\$N\$r\$p\$salt\$hash/);
    expect(parseKeyHash(good.replace('16384', '1000'))).toMatch(/power of 2/);
    expect(parseKeyHash(good.replace('16384', String(1 << 24)))).toMatch(/power of 2/);
    expect(parseKeyHash(good.replace('$8$', '$99$'))).toMatch(/^r must/);
    expect(parseKeyHash(good.replace('$1$A', '$0$A'))).toMatch(/^p must/);
    expect(parseKeyHash(good.replace('$AAAAAAAAAAAAAAAAAAAAAA$', '$AA$'))).toMatch(/salt/);
    expect(parseKeyHash(`${good}=`)).toMatch(/hash/);
  });
});

describe('Authenticator', () => {
  async function setup() {
    const alice = await generateApiKey();
    const bob = await generateApiKey();
    const custom = 'ops.a-key-chosen-by-the-operator-42';
    const text = `principals:
  - name: alice
    keys: ['${alice.hash}']
    grants: [{ verbs: [lease], prefix: 'orders/' }]
  - name: bob
    keys: ['${bob.hash}', '${await hashApiKey(custom)}']
    grants: [{ verbs: [read], prefix: '*' }]
`;
    return { alice, bob, custom, auth: new Authenticator(parseAuthText('auth.yaml', text)) };
  }

  it('finds the principal of each key; unknown, wrong and malformed credentials are refused alike', async () => {
    const { alice, bob, custom, auth } = await setup();
    const socket = new Socket();
    const who = async (h: string | undefined) => {
      const r = await auth.authenticate(h, socket);
      return r.ok ? (r.principal?.name ?? 'nobody') : 'refused';
    };
    expect(await who(`Bearer ${alice.key}`)).toBe('alice');
    expect(await who(`bearer ${bob.key}`)).toBe('bob');
    expect(await who(`Bearer ${custom}`)).toBe('bob');
    expect(await who(undefined)).toBe('nobody');
    expect(await who(`Bearer ${(await generateApiKey()).key}`)).toBe('refused');
    const last = alice.key.slice(-1);
    expect(await who(`Bearer ${alice.key.slice(0, -1)}${last === 'A' ? 'B' : 'A'}`)).toBe('refused');
    expect(await who(`Basic ${Buffer.from(`x:${alice.key}`).toString('base64')}`)).toBe('refused');
    expect(await who('Bearer')).toBe('refused');
  });

  it('runs the KDF once per distinct key: verified and refused keys are cached', async () => {
    const { alice, auth } = await setup();
    const wrong = (await generateApiKey()).key;
    // A wrong key whose salt names alice's hash: one KDF run, then cached as refused.
    const sameSalt = `${alice.key.slice(0, 26)}${'A'.repeat(43)}`;
    compared.calls.length = 0;
    for (let i = 0; i < 3; i++) expect((await auth.principalForKey(alice.key))?.name).toBe('alice');
    expect(compared.calls).toHaveLength(1);
    for (let i = 0; i < 3; i++) expect(await auth.principalForKey(sameSalt)).toBeNull();
    expect(compared.calls).toHaveLength(2);
    // A generated key with a salt no hash has costs no KDF run at all.
    expect(await auth.principalForKey(wrong)).toBeNull();
    expect(compared.calls).toHaveLength(2);
  });

  it('reads a client certificate only off a TLS socket that verified it, and names its principal', async () => {
    const { alice } = await setup();
    const fp = Array.from({ length: 32 }, () => '5A').join(':');
    const withCerts = new Authenticator(
      parseAuthText(
        'auth.yaml',
        `principals:
  - { name: svc, certificates: [{ fingerprint: '${fp}' }], grants: [] }
  - { name: alice, keys: ['${alice.hash}'], grants: [] }
`,
      ),
    );
    const cert = { fingerprint256: fp, subject: { CN: 'svc' } };
    const tls = (authorized: boolean) =>
      ({ encrypted: true, authorized, getPeerCertificate: () => cert }) as unknown as Socket;
    expect(peerCertificate(tls(true))).toBe(cert);
    expect(peerCertificate(tls(false))).toBeNull(); // presented, not verified: names nobody
    expect(peerCertificate(new Socket())).toBeNull(); // plain HTTP
    const empty = { encrypted: true, authorized: true, getPeerCertificate: () => ({}) } as unknown as Socket;
    expect(peerCertificate(empty)).toBeNull();

    const who = async (h: string | undefined, socket: Socket) => {
      const r = await withCerts.authenticate(h, socket);
      return r.ok ? (r.principal?.name ?? 'nobody') : 'refused';
    };
    expect(await who(undefined, tls(true))).toBe('svc');
    expect(await who(undefined, tls(false))).toBe('nobody');
    // A key and a certificate that name different principals: refused, not either one.
    expect(await who(`Bearer ${alice.key}`, tls(true))).toBe('refused');
    expect(await who(`Bearer ${alice.key}`, tls(false))).toBe('alice');
  });

  it('drops cached verdicts when another auth file is put in force', async () => {
    const { alice, auth } = await setup();
    expect((await auth.principalForKey(alice.key))?.name).toBe('alice');
    auth.replace(
      parseAuthText('auth.yaml', 'principals: [{ name: carol, certificates: [{ cn: x }], grants: [] }]'),
    );
    expect(await auth.principalForKey(alice.key)).toBeNull();
  });
});
