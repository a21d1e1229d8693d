/**
 * The auth file (src/auth/file.ts): YAML and JSON accepted, every error located at
 * file:line:column and field; and the pure decisions over it (src/auth/model.ts):
 * grants on prefixes, and which principal a client certificate names.
 */
import { describe, expect, it } from 'vitest';
import { AuthFileError, parseAuthText } from '../../src/auth/file.js';
import {
  boundOwner,
  may,
  ownerPrincipal,
  prefixesFor,
  principalForCertificate,
  type PeerCertificateLike,
} from '../../src/auth/model.js';

const HASH = 'scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
const HASH2 = 'scrypt$16384$8$1$BBBBBBBBBBBBBBBBBBBBBA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
const FP = 'ab'.repeat(32);
const FP_NODE = Array.from({ length: 32 }, () => 'AB').join(':');

function errorsOf(text: string, file = 'auth.yaml'): string[] {
  try {
    parseAuthText(file, text);
  } catch (err) {
    if (err instanceof AuthFileError) return err.message.split('\n');
    throw err;
  }
  return [];
}

describe('auth file', () => {
  it('reads principals with keys, certificates and grants; public endpoints default to all four', () => {
    const c = parseAuthText(
      'auth.yaml',
      `version: 1
principals:
  - name: orders-worker
    keys:
      - '${HASH}'
    grants:
      - verbs: [lease]
        prefix: orders/
  - name: ops
    certificates:
      - fingerprint: '${FP}'
      - cn: ops.example
    grants:
      - { verbs: [read, events], prefix: '*' }
`,
    );
    expect(c.principals.map((p) => p.name)).toEqual(['orders-worker', 'ops']);
    expect([...c.public].sort()).toEqual(['healthz', 'keys', 'metrics', 'readyz']);
    expect(c.principals[1]?.certificates).toEqual([
      { fingerprint: FP_NODE, cn: null },
      { fingerprint: null, cn: 'ops.example' },
    ]);
    expect(c.principals[1]?.grants[0]).toEqual({ verbs: ['read', 'events'], prefix: '' });
    expect(Object.isFrozen(c.principals[0])).toBe(true);
  });

  it('reads JSON too, and an empty public list', () => {
    const c = parseAuthText(
      'auth.json',
      JSON.stringify({
        public: [],
        principals: [{ name: 'a', keys: [HASH], grants: [{ verbs: ['admin'], prefix: '' }] }],
      }),
    );
    expect(c.public.size).toBe(0);
    expect(c.principals[0]?.name).toBe('a');
  });

  it('names file, line, column and field of each error', () => {
    const text = `principals:
  - name: alice
    keys: ['not-a-hash']
    grants:
      - verbs: [lease, fly]
        prefix: orders/
  - name: bad/name
    keys: ['${HASH2}']
    grants: []
    colour: blue
  - name: nobody
    grants: []
public: [healthz, admin]
`;
    expect(errorsOf(text)).toEqual([
      'auth.yaml:13:19: public[1]: must be one of healthz, readyz, metrics, keys',
      'auth.yaml:3:12: principals[0].keys[0]: must be "scrypt$N$r$p$salt$hash" or "scrypt$N$r$p$salt$hash$id" (the output of fencegate auth hash)',
      'auth.yaml:5:24: principals[0].grants[0].verbs[1]: unknown verb; one of acquire, renew, release, lease, read, events, admin',
      'auth.yaml:10:5: principals[1].colour: unknown field; allowed: name, keys, certificates, grants',
      'auth.yaml:7:11: principals[1].name: must be 1–64 characters of letters, digits, ".", "_" or "-" (no "/")',
      'auth.yaml:11:5: principals[2]: a principal needs at least one credential: keys or certificates',
    ]);
  });

  it('refuses syntax errors, a missing principals list, duplicates and a bad fingerprint, located', () => {
    expect(errorsOf('principals: [\n')[0]).toMatch(/^auth\.yaml:2:1: .*YAML syntax error/);
    expect(errorsOf('version: 2\nprincipals: []\n')).toEqual([
      'auth.yaml:1:10: version: must be 1',
      'auth.yaml:2:13: principals: must be a non-empty list of principals',
    ]);
    const dup = `principals:
  - { name: a, keys: ['${HASH}'], grants: [] }
  - { name: a, keys: ['${HASH}'], grants: [] }
  - { name: c, certificates: [{ fingerprint: 'zz' }], grants: [] }
`;
    expect(errorsOf(dup)).toEqual(
      expect.arrayContaining([
        'auth.yaml:3:13: principals[1].name: "a" is also principals[0]',
        'auth.yaml:3:23: principals[1].keys[0]: the same key id (or salt) as principals[0]',
        'auth.yaml:4:46: principals[2].certificates[0].fingerprint: must be a SHA-256 fingerprint: 64 hex digits, colons allowed',
      ]),
    );
  });
});

describe('grants and certificates', () => {
  const config = parseAuthText(
    'auth.yaml',
    `principals:
  - name: worker
    keys: ['${HASH}']
    certificates: [{ fingerprint: '${FP}' }]
    grants:
      - { verbs: [lease], prefix: orders/ }
      - { verbs: [read], prefix: orders/eu/ }
  - name: ops
    certificates: [{ cn: ops.example }]
    grants: [{ verbs: [admin], prefix: '' }]
  - name: pinned
    certificates: [{ cn: svc, fingerprint: '${'cd'.repeat(32)}' }]
    grants: [{ verbs: [acquire], prefix: x }]
`,
  );
  const [worker, ops, pinned] = config.principals as [
    (typeof config.principals)[0],
    (typeof config.principals)[0],
    (typeof config.principals)[0],
  ];

  it('a verb on a prefix; lease covers acquire, renew and release; admin covers everything', () => {
    expect(may(worker, 'acquire', 'orders/1')).toBe(true);
    expect(may(worker, 'release', 'orders/1')).toBe(true);
    expect(may(worker, 'acquire', 'payments/1')).toBe(false);
    expect(may(worker, 'acquire', 'orders')).toBe(false);
    expect(may(worker, 'read', 'orders/1')).toBe(false);
    expect(may(worker, 'read', 'orders/eu/1')).toBe(true);
    expect(may(worker, 'events', 'orders/1')).toBe(false);
    expect(prefixesFor(worker, 'read')).toEqual(['orders/eu/']);
    for (const verb of ['acquire', 'renew', 'release', 'read', 'events'] as const)
      expect(may(ops, verb, 'anything')).toBe(true);
  });

  it('maps a verified peer certificate to its principal by fingerprint and/or CN', () => {
    const cert = (fingerprint256: string, CN?: string | string[]): PeerCertificateLike => ({
      fingerprint256,
      subject: CN === undefined ? {} : { CN },
    });
    const other = Array.from({ length: 32 }, () => '01').join(':');
    const pinnedFp = Array.from({ length: 32 }, () => 'CD').join(':');
    expect(principalForCertificate(cert(FP_NODE), config.principals)?.name).toBe('worker');
    expect(principalForCertificate(cert(FP_NODE.toLowerCase()), config.principals)?.name).toBe('worker');
    expect(principalForCertificate(cert(other, 'ops.example'), config.principals)?.name).toBe('ops');
    expect(principalForCertificate(cert(other, ['ops.example', 'x']), config.principals)).toBeNull();
    expect(principalForCertificate(cert(other, 'OPS.example'), config.principals)).toBeNull();
    expect(principalForCertificate(cert(pinnedFp, 'svc'), config.principals)?.name).toBe(pinned.name);
    expect(principalForCertificate(cert(other, 'svc'), config.principals)).toBeNull();
    expect(principalForCertificate(cert(pinnedFp, 'other'), config.principals)).toBeNull();
    expect(principalForCertificate(null, config.principals)).toBeNull();
    expect(principalForCertificate({}, config.principals)).toBeNull();
  });

  it('binds owners to principals: the principal is what comes before the first "/"', () => {
    expect(boundOwner('worker', 'w/1')).toBe('@worker/w/1');
    expect(ownerPrincipal('@worker/w/1')).toBe('worker');
    // Sent without a principal (before an auth file existed): names nobody, whatever its text.
    expect(ownerPrincipal('worker/w/1')).toBeNull();
    expect(ownerPrincipal('w1')).toBeNull();
    expect(ownerPrincipal(null)).toBeNull();
  });
});
