/**
 * fast-check arbitraries for raw HTTP/1.1 requests against both listeners. A case
 * is generated from the seed alone; tokens (only known at run time) are placeholders
 * resolved by `render`, so a seed always produces the same requests.
 *
 * Deliberately NOT generated (known bugs, each with its own it.fails repro in
 * fuzz-http.test.ts, see docs/fuzzing.md): a raw `#` in a data-listener path (KB-2).
 */
import fc from 'fast-check';

export type TokenChoice =
  | 'none'
  | 'current'
  | 'stale'
  | 'forged'
  | 'max'
  | 'overflow'
  | 'zero'
  | 'leading-zero'
  | 'signed'
  | 'padded'
  | 'hex'
  | 'empty'
  | 'garbage'
  | 'dup-current'
  | 'dup-mixed';

export interface RenderCtx {
  /** Token strings per lock name of the route the case aims at. */
  token(choice: TokenChoice, lock: LockName): string[];
  /** For alias cases: a genuine token for the lock the gateway derives from `path` (or null). */
  aliasToken(path: string): Promise<string | null>;
}

export type LockName = 'fenced' | 'leased' | 'shadowed' | 'tenant';

export interface FuzzCase {
  family: string;
  listener: 'data' | 'control';
  methods: string[];
  /** The body framing may leave the server waiting for more bytes: silence is acceptable. */
  hang: boolean;
  /** Final responses to wait for before the quiet period. */
  expect: number;
  render(ctx: RenderCtx): Promise<Buffer> | Buffer;
}

const CRLF = '\r\n';
const STANDARD = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'];
const WRITES = ['POST', 'PUT', 'PATCH', 'DELETE'];

export const methodArb: fc.Arbitrary<string> = fc.oneof(
  { weight: 12, arbitrary: fc.constantFrom(...WRITES) },
  { weight: 4, arbitrary: fc.constantFrom(...STANDARD) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'PROPFIND',
      'MKCOL',
      'PURGE',
      'SEARCH',
      'LINK',
      'TRACE',
      'REPORT',
      'LOCK',
      'QUERY',
      'CONNECT',
    ),
  },
  { weight: 2, arbitrary: fc.constantFrom(...STANDARD).map((m) => m.toLowerCase()) },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Z][A-Z_-]{0,15}$/) },
  { weight: 1, arbitrary: fc.integer({ min: 100, max: 6000 }).map((n) => 'P'.repeat(n)) },
  { weight: 1, arbitrary: fc.constantFrom('PU T', 'PUT\t', 'P\x00T', 'PÜT', '') },
);

/** Segments that exercise the gateway's path normalisation (see docs/policy.md, Paths). */
const trickySegment = fc.constantFrom(
  '.',
  '..',
  '%2e',
  '%2E%2e',
  '.%2e',
  '%2F',
  '%2f',
  '1%2F..%2F2',
  '%5C',
  '%5c',
  '%00',
  '1%00',
  '%',
  '%Z',
  '%ZZ',
  '%1',
  '%FF',
  '%C3%A9',
  '%ED%A0%80',
  '%EF%BF%BD',
  '%C0%AF',
  '%E2%82',
  '%7F',
  '%C2%85',
  '%20',
  '%31',
  '%6Fpen',
  '%6frders',
  ';',
  '1;x',
  '1?',
  '%3F',
  '%23',
  '~',
  '\xff',
  '\xe9',
  '\t',
  'a b',
);

/** RFC 3986 pchar plus a few extras; never a raw '#' (KB-2). */
const plainSegment = fc.stringMatching(/^[A-Za-z0-9._~!$&'()*+,;=:@%-]{1,16}$/);

const segmentArb = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('open', 'leased', 'shadowed', 'tenanted', '1', '2', 'orders') },
  { weight: 4, arbitrary: trickySegment },
  { weight: 3, arbitrary: plainSegment },
  { weight: 1, arbitrary: fc.integer({ min: 100, max: 4000 }).map((n) => 'a'.repeat(n)) },
  { weight: 1, arbitrary: fc.constant('') },
);

const queryArb = fc.option(fc.stringMatching(/^[A-Za-z0-9=&%._+-]{0,24}$/), { nil: undefined, freq: 3 });

export const dataPathArb: fc.Arbitrary<string> = fc
  .tuple(
    fc.oneof(
      { weight: 8, arbitrary: fc.constant('/orders') },
      { weight: 1, arbitrary: fc.constantFrom('', '/_writes', '/x', '//orders', '/%6Frders', '/ORDERS') },
    ),
    fc.array(segmentArb, { minLength: 0, maxLength: 4 }),
    fc.boolean(),
    queryArb,
  )
  .map(([prefix, segs, slash, q]) => {
    let p = prefix + segs.map((s) => `/${s}`).join('') + (slash ? '/' : '');
    if (p === '') p = '/';
    if (q !== undefined && !q.toLowerCase().includes('delayms')) p += `?${q}`;
    return p;
  });

const tokenChoiceArb: fc.Arbitrary<TokenChoice> = fc.constantFrom(
  'none',
  'current',
  'current',
  'stale',
  'stale',
  'forged',
  'forged',
  'max',
  'overflow',
  'zero',
  'leading-zero',
  'signed',
  'padded',
  'hex',
  'empty',
  'garbage',
  'dup-current',
  'dup-mixed',
);

/** Header names worth spoofing, stripping or duplicating. */
const headerNameArb = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.constantFrom(
      'x-fencegate-fence',
      'x-fencegate-lock',
      'x-fencegate-route',
      'x-fencegate-request-id',
      'x-fencegate-whatever',
      'forwarded',
      'x-forwarded-for',
      'x-forwarded-host',
      'x-forwarded-proto',
      'x-request-id',
      'x-client-id',
      'x-tenant',
      'content-type',
      'accept',
      'keep-alive',
      'te',
      'trailer',
      'upgrade',
      'proxy-connection',
      'proxy-authorization',
      'via',
      'cookie',
      'host',
      'expect',
      'X-FENCEGATE-FENCE',
      'Fencing-Token',
      'FENCING-TOKEN',
      'fencing-token ',
      'x-tenant',
    ),
  },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,24}$/) },
);

const headerValueArb = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      '100-continue',
      'spoof',
      'admitted',
      'spoof-fenced:1',
      'for=6.6.6.6;host=spoof',
      'spoof, spoof',
      '',
    ),
  },
  { weight: 3, arbitrary: fc.stringMatching(/^[\x20-\x7e]{0,40}$/) },
  { weight: 1, arbitrary: fc.integer({ min: 1000, max: 30_000 }).map((n) => 'v'.repeat(n)) },
  { weight: 1, arbitrary: fc.constantFrom('a\x00b', '\xff\xfe', 'x\x7fy', ' padded ') },
);

const connectionArb = fc
  .subarray(
    [
      'close',
      'keep-alive',
      'fencing-token',
      'Fencing-Token',
      'x-fencegate-fence',
      'x-fencegate-lock',
      'x-fencegate-request-id',
      'host',
      'x-forwarded-for',
      'forwarded',
      'content-length',
      'content-type',
      'x-tenant',
      'upgrade',
      'te',
    ],
    { minLength: 1, maxLength: 4 },
  )
  .chain((names) => fc.constantFrom(', ', ',', ' ,').map((sep) => names.join(sep)));

type BodySpec =
  | { kind: 'none' }
  | { kind: 'exact'; bytes: string }
  | { kind: 'json'; text: string }
  | { kind: 'huge-declared'; declared: string; sent: string }
  | { kind: 'chunked'; chunks: string[] }
  | { kind: 'bad-chunked'; raw: string }
  | { kind: 'odd-length'; header: string; sent: string };

const bytesArb = fc.uint8Array({ maxLength: 600 }).map((a) => Buffer.from(a).toString('latin1'));

const bodyArb: fc.Arbitrary<BodySpec> = fc.oneof(
  { weight: 5, arbitrary: fc.constant({ kind: 'none' } as const) },
  { weight: 4, arbitrary: bytesArb.map((bytes) => ({ kind: 'exact', bytes }) as const) },
  { weight: 3, arbitrary: fc.json({ maxDepth: 3 }).map((text) => ({ kind: 'json', text }) as const) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.constantFrom('1048577', '99999999', '999999999999', '18446744073709551616'), bytesArb)
      .map(([declared, sent]) => ({ kind: 'huge-declared', declared, sent: sent.slice(0, 50) }) as const),
  },
  {
    weight: 2,
    arbitrary: fc.array(bytesArb, { maxLength: 3 }).map((chunks) => ({ kind: 'chunked', chunks }) as const),
  },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom(
        'zz\r\nabc\r\n0\r\n\r\n',
        '-1\r\nabc\r\n0\r\n\r\n',
        'ffffffffffffffffffff\r\nabc\r\n0\r\n\r\n',
        '3\r\nabcdef\r\n0\r\n\r\n',
        '0x3\r\nabc\r\n0\r\n\r\n',
        '3 ;x\r\nabc\r\n0\r\n\r\n',
        '3\nabc\n0\n\n',
        '5\r\nab',
        '3\r\nabc\r\n',
        '3\r\nabc\r\n0\r\nFencing-Token: 1\r\n\r\n',
        ' 3\r\nabc\r\n0\r\n\r\n',
        '3\r\nabc0\r\n\r\n',
        '\r\n\r\n',
      )
      .map((raw) => ({ kind: 'bad-chunked', raw }) as const),
  },
  {
    weight: 2,
    arbitrary: fc
      .constantFrom(
        ['Content-Length:  3 ', 'abc'],
        ['Content-Length: +3', 'abc'],
        ['Content-Length: 3, 3', 'abc'],
        ['Content-Length: 3,4', 'abcd'],
        ['Content-Length: 03', 'abc'],
        ['Content-Length: -1', ''],
        ['Content-Length: 0x3', 'abc'],
        ['Content-Length: 3\r\nContent-Length: 3', 'abc'],
        ['Content-Length: 3\r\nContent-Length: 4', 'abcd'],
        ['Content-Length : 3', 'abc'],
        ['Content-Length: 3 3', 'abc'],
        ['Content-Length:', ''],
        ['Content-Length: 1', 'abcdef'],
      )
      .map(
        ([header, sent]) => ({ kind: 'odd-length', header: header as string, sent: sent as string }) as const,
      ),
  },
);

interface RequestSpec {
  method: string;
  path: string;
  version: string;
  host: 'x' | 'none' | 'dup' | 'weird';
  token: TokenChoice;
  tokenLock: LockName;
  tenant: 'none' | 't1' | 'dup' | 'other';
  headers: [string, string][];
  connection: string | undefined;
  many: number;
  body: BodySpec;
  keepAlive: boolean;
}

const requestSpecArb: fc.Arbitrary<RequestSpec> = fc.record({
  method: methodArb,
  path: dataPathArb,
  version: fc.constantFrom(
    'HTTP/1.1',
    'HTTP/1.1',
    'HTTP/1.1',
    'HTTP/1.1',
    'HTTP/1.0',
    'HTTP/2.0',
    'HTTP/1.2',
    'http/1.1',
    'HTTP/1.1 x',
  ),
  host: fc.constantFrom('x', 'x', 'x', 'none', 'dup', 'weird'),
  token: tokenChoiceArb,
  tokenLock: fc.constantFrom('fenced', 'fenced', 'leased', 'shadowed', 'tenant'),
  tenant: fc.constantFrom('none', 't1', 't1', 'dup', 'other'),
  headers: fc.array(fc.tuple(headerNameArb, headerValueArb), { maxLength: 6 }),
  connection: fc.option(connectionArb, { nil: undefined, freq: 3 }),
  many: fc.oneof(
    { weight: 6, arbitrary: fc.constant(0) },
    { weight: 1, arbitrary: fc.integer({ min: 50, max: 400 }) },
  ),
  body: bodyArb,
  keepAlive: fc.boolean(),
});

/** Resolves a lock name's token choice into zero or more Fencing-Token header lines. */
function tokenLines(choice: TokenChoice, lock: LockName, ctx: RenderCtx): string[] {
  return ctx.token(choice, lock).map((v, i) => `${i % 2 === 0 ? 'Fencing-Token' : 'fencing-token'}: ${v}`);
}

function headLines(spec: RequestSpec, ctx: RenderCtx): string[] {
  const lines: string[] = [];
  if (spec.host === 'x') lines.push('Host: x');
  if (spec.host === 'dup') lines.push('Host: x', 'Host: spoof.example');
  if (spec.host === 'weird') lines.push('Host: spoof@evil:99999');
  lines.push(...tokenLines(spec.token, spec.tokenLock, ctx));
  if (spec.tenant === 't1') lines.push('X-Tenant: t1');
  if (spec.tenant === 'dup') lines.push('X-Tenant: t1', 'X-Tenant: t1');
  if (spec.tenant === 'other') lines.push('X-Tenant: spoof');
  for (const [n, v] of spec.headers) lines.push(`${n}: ${v}`);
  for (let i = 0; i < spec.many; i++) lines.push(`X-Many-${i}: ${i}`);
  if (spec.connection !== undefined) lines.push(`Connection: ${spec.connection}`);
  else if (!spec.keepAlive) lines.push('Connection: close');
  return lines;
}

function bodyParts(body: BodySpec): { lines: string[]; payload: string; hang: boolean } {
  switch (body.kind) {
    case 'none':
      return { lines: [], payload: '', hang: false };
    case 'exact':
      return {
        lines: [`Content-Length: ${Buffer.byteLength(body.bytes, 'latin1')}`],
        payload: body.bytes,
        hang: false,
      };
    case 'json':
      return {
        lines: [
          'Content-Type: application/json',
          `Content-Length: ${Buffer.byteLength(body.text, 'latin1')}`,
        ],
        payload: body.text,
        hang: false,
      };
    case 'huge-declared':
      return { lines: [`Content-Length: ${body.declared}`], payload: body.sent, hang: true };
    case 'chunked':
      return {
        lines: ['Transfer-Encoding: chunked'],
        payload: body.chunks
          .filter((c) => c.length > 0)
          .map((c) => `${Buffer.byteLength(c, 'latin1').toString(16)}${CRLF}${c}${CRLF}`)
          .join('')
          .concat(`0${CRLF}${CRLF}`),
        hang: false,
      };
    case 'bad-chunked':
      return { lines: ['Transfer-Encoding: chunked'], payload: body.raw, hang: true };
    case 'odd-length':
      return { lines: [body.header], payload: body.sent, hang: true };
  }
}

function renderRequest(spec: RequestSpec, ctx: RenderCtx): { text: string; hang: boolean } {
  const b = bodyParts(spec.body);
  const lines = [...headLines(spec, ctx), ...b.lines];
  return {
    text: `${spec.method} ${spec.path} ${spec.version}${CRLF}${lines.join(CRLF)}${CRLF}${CRLF}${b.payload}`,
    hang: b.hang,
  };
}

const latin1 = (s: string) => Buffer.from(s, 'latin1');

/** Structured requests to the data listener, sometimes two pipelined on one connection. */
const dataRequestArb: fc.Arbitrary<FuzzCase> = fc
  .tuple(requestSpecArb, fc.option(requestSpecArb, { nil: undefined, freq: 6 }))
  .map(([first, second]): FuzzCase => {
    const specs = second ? [{ ...first, keepAlive: true, connection: undefined }, second] : [first];
    const hang = specs.some((s) => bodyParts(s.body).hang) || specs.some((s) => s.version !== 'HTTP/1.1');
    return {
      family: specs.length > 1 ? 'data-pipelined' : 'data-request',
      listener: 'data',
      methods: specs.map((s) => s.method),
      hang,
      expect: specs.length,
      render: (ctx) => latin1(specs.map((s) => renderRequest(s, ctx).text).join('')),
    };
  });

/**
 * Smuggling attempts: an outer request whose framing is ambiguous, with a fenced
 * write hidden where a lenient parser would see a second request.
 */
const SMUGGLE_FRAMINGS: ((inner: string) => string)[] = [
  (i) => `Content-Length: ${5 + i.length}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding: xchunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding:\tchunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding: cHuNkEd\r\nContent-Length: 5\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n${i}`,
  (i) => `X-Pad: y\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Content-Length: 5, ${5 + i.length}\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Content-Length: 5\r\nContent-Length: ${5 + i.length}\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Content-Length : 5\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Content-Length: 5 \r\n\r\n0\r\n\r\n${i}`,
  (i) => `Content-Length:\r\n 5\r\n\r\n0\r\n\r\n${i}`,
  (i) => `Transfer-Encoding: chunked\r\n\r\n${(i.length + 0).toString(16)};ext\r\n${i}\r\n0\r\n\r\n`,
  (i) => `Transfer-Encoding: chunked\r\n\r\n0\r\n${i}`,
  (i) => `Content-Length: 0\r\n\r\n${i}`,
  (i) => `Content-Length: 0\n\n${i}`,
];

const smuggleArb: fc.Arbitrary<FuzzCase> = fc
  .record({
    framing: fc.nat({ max: SMUGGLE_FRAMINGS.length - 1 }),
    outerPath: fc.constantFrom('/orders/open', '/orders/1', '/orders/shadowed', '/orders/leased'),
    outerToken: fc.constantFrom<TokenChoice>('none', 'current', 'stale'),
    innerPath: fc.constantFrom('/orders/1', '/orders/leased', '/orders/tenanted', '/orders/2'),
    innerToken: fc.constantFrom<TokenChoice>('none', 'stale', 'forged', 'garbage'),
    innerLineEnd: fc.constantFrom('\r\n', '\n'),
    method: fc.constantFrom('POST', 'PUT'),
  })
  .map((s): FuzzCase => {
    const lockOf = (p: string): LockName =>
      p.endsWith('leased') ? 'leased' : p.endsWith('tenanted') ? 'tenant' : 'fenced';
    return {
      family: 'data-smuggle',
      listener: 'data',
      methods: [s.method, 'PUT'],
      hang: true,
      expect: 2,
      render: (ctx) => {
        const e = s.innerLineEnd;
        const innerHead = [
          `PUT ${s.innerPath} HTTP/1.1`,
          'Host: x',
          'X-Tenant: t1',
          ...tokenLines(s.innerToken, lockOf(s.innerPath), ctx),
          'Content-Length: 7',
          'Connection: close',
        ].join(e);
        const inner = `${innerHead}${e}${e}smuggle`;
        const outerHead = [
          `${s.method} ${s.outerPath} HTTP/1.1`,
          'Host: x',
          ...tokenLines(s.outerToken, lockOf(s.outerPath), ctx),
        ];
        const framing = SMUGGLE_FRAMINGS[s.framing] as (i: string) => string;
        return latin1(`${outerHead.join(CRLF)}${CRLF}${framing(inner)}`);
      },
    };
  });

/** Raw header-section attacks: bare LF, obs-fold, NUL, space before colon, bad lines. */
const malformedHeaderArb: fc.Arbitrary<FuzzCase> = fc
  .record({
    listener: fc.constantFrom<'data' | 'control'>('data', 'control'),
    path: fc.constantFrom('/orders/1', '/orders/open', '/orders/leased', '/v1/locks/fenced%3A1', '/healthz'),
    method: fc.constantFrom('PUT', 'POST', 'GET'),
    attack: fc.constantFrom(
      'Fencing-Token: 1\r\n 2',
      'Fencing-Token:\r\n\t1',
      'Fencing-Token : 1',
      'Fencing-Token: 1\nX-A: b',
      'Fencing-Token: 1\x00',
      'Fencing-Token\x00: 1',
      ' Fencing-Token: 1',
      'X-Fencegate-Fence: admitted\r\n\tspoof',
      'Host: x\r\nHost x',
      'no-colon-line',
      ':empty-name',
      'X-\xff: 1',
      'X-A: b\rX-B: c',
      'Connection: fencing-token\r\n Fencing-Token: 1',
      '\x01',
    ),
    token: fc.constantFrom<TokenChoice>('none', 'current', 'stale'),
  })
  .map((s): FuzzCase => ({
    family: 'malformed-header',
    listener:
      s.listener === 'control' || s.path.startsWith('/v1') || s.path === '/healthz' ? 'control' : 'data',
    methods: [s.method],
    hang: true,
    expect: 1,
    render: (ctx) =>
      latin1(
        [
          `${s.method} ${s.path} HTTP/1.1`,
          'Host: x',
          ...tokenLines(s.token, 'fenced', ctx),
          s.attack,
          'Content-Length: 0',
          'Connection: close',
        ]
          .join(CRLF)
          .concat(CRLF + CRLF),
      ),
  }));

/** A path whose gateway-derived lock differs from "fenced:1" while looking like order 1 (alias check). */
const aliasArb: fc.Arbitrary<FuzzCase> = fc
  .record({
    suffix: fc.oneof(
      fc.constantFrom(
        ';x',
        '%23x',
        '%3Fx',
        '%20',
        '%09',
        '.',
        '..x',
        '~',
        '%7E',
        '%2e',
        '%3B',
        '%E2%80%8B',
        '%EF%BC%91',
        '/',
        '//',
        '?',
        '?x=1',
      ),
      fc.stringMatching(/^[A-Za-z0-9._~!$&'()*+,;=:@%?-]{1,6}$/),
    ),
    prefix: fc.constantFrom('', '%31'),
    method: fc.constantFrom('PUT', 'POST', 'PATCH', 'DELETE'),
  })
  .map((s): FuzzCase => ({
    family: 'alias',
    listener: 'data',
    methods: [s.method],
    hang: false,
    expect: 1,
    render: async (ctx) => {
      const base = s.prefix === '%31' ? '%31' : '1';
      const path = `/orders/${base}${s.suffix}`;
      const token = await ctx.aliasToken(path);
      const lines = [`${s.method} ${path} HTTP/1.1`, 'Host: x', 'Content-Length: 5', 'Connection: close'];
      if (token !== null) lines.push(`Fencing-Token: ${token}`);
      return latin1(`${lines.join(CRLF)}${CRLF}${CRLF}alias`);
    },
  }));

// ---------------------------------------------------------------- control listener

const keyArb = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom('fenced%3A1', 'leased', 'shadowed', 'tenant%3At1', 'fuzz-k', 'a%2Fb'),
  },
  {
    weight: 3,
    arbitrary: fc
      .string({ unit: 'binary', minLength: 1, maxLength: 20 })
      .map((s) => encodeURIComponent(`fz-${s}`)),
  },
  {
    weight: 4,
    arbitrary: fc.constantFrom(
      '%FF',
      '%ED%A0%80',
      '%C0%80',
      '%C0%AF',
      '%E2%82',
      '%F4%90%80%80',
      '%EF%BF%BD',
      '%C2%80',
      '%C2%9F',
      '%7F',
      '%00',
      'a%00b',
      '%',
      '%zz',
      '%2',
      '\xff',
      '\xc3\xa9',
      '',
      '%20',
      '.',
      '..',
      '%2e%2e',
      '%0A',
      'k%0D%0AX-Injected:%201',
    ),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      'a'.repeat(256),
      'a'.repeat(257),
      '%C3%A9'.repeat(128),
      '%C3%A9'.repeat(129),
      'b'.repeat(2000),
    ),
  },
);

const ms = fc.oneof(
  { weight: 3, arbitrary: fc.integer({ min: 0, max: 200 }) },
  { weight: 3, arbitrary: fc.integer({ min: 100, max: 3_600_000 }) },
  {
    weight: 2,
    arbitrary: fc.constantFrom<unknown>(
      -1,
      99,
      3_600_001,
      1e21,
      1.5,
      Number.MAX_SAFE_INTEGER + 2,
      '100',
      null,
      true,
      [],
      {},
      'NaN',
    ),
  },
);

/** waitMs: only short waits (a long one would just sit in the fair queue of a held lock). */
const waitMs = fc.oneof(
  fc.integer({ min: 0, max: 150 }),
  fc.constantFrom<unknown>(-1, 300_001, 1e12, 2.5, '0', null, []),
);

const fieldArb = fc.dictionary(
  fc.constantFrom(
    'owner',
    'ttlMs',
    'waitMs',
    'requestId',
    'leaseId',
    'extra',
    '__proto__',
    'constructor',
    'token',
    'Owner',
  ),
  fc.oneof(
    fc.string({ maxLength: 20 }),
    fc.string({ unit: 'binary', maxLength: 10 }),
    fc.constantFrom<unknown>('', 'x'.repeat(200), '\u0000', '\ud800', 'spoof'),
    ms,
    fc.jsonValue({ maxDepth: 2 }),
  ),
  { maxKeys: 5 },
);

const controlBodyArb = fc.oneof(
  {
    weight: 3,
    arbitrary: fc
      .record(
        { owner: fc.string({ minLength: 1, maxLength: 12 }), ttlMs: ms, waitMs },
        { requiredKeys: ['owner'] },
      )
      .map((o) => JSON.stringify(o)),
  },
  {
    weight: 2,
    arbitrary: fc
      .record({ leaseId: fc.oneof(fc.uuid(), fc.string()), ttlMs: ms }, { requiredKeys: [] })
      .map((o) => JSON.stringify(o)),
  },
  { weight: 3, arbitrary: fieldArb.map((o) => JSON.stringify(o)) },
  { weight: 2, arbitrary: fc.json({ maxDepth: 3 }) },
  { weight: 1, arbitrary: bytesArb },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '{"owner":"x","owner":"y"}',
      '{"owner":"x"',
      '{"owner":"\\ud800"}',
      '\ufeff{"owner":"x"}',
      '{"owner":"x"}garbage',
      '[]',
      'null',
      '"str"',
      '1e999',
    ),
  },
  { weight: 1, arbitrary: fc.constant(`{"owner":"${'o'.repeat(70_000)}"}`) },
);

const controlCaseArb: fc.Arbitrary<FuzzCase> = fc
  .record({
    method: fc.oneof(
      { weight: 8, arbitrary: fc.constantFrom('POST', 'GET') },
      { weight: 3, arbitrary: methodArb },
    ),
    path: fc.oneof(
      {
        weight: 8,
        arbitrary: fc
          .tuple(
            keyArb,
            fc.constantFrom('/acquire', '/acquire', '/renew', '/release', '', '', '/nope', '/acquire/x', '/'),
            queryArb,
          )
          .map(([k, op, q]) => `/v1/locks/${k}${op}${q === undefined ? '' : `?${q}`}`),
      },
      {
        weight: 2,
        arbitrary: fc.constantFrom(
          '/healthz',
          '/readyz',
          '/metrics',
          '/v1/events',
          '/v1/locks',
          '/v1/locks/',
          '/',
          '/v1//locks/a',
          '/v1/locks/a/../b/acquire',
          '/dashboard',
          '*',
          'http://x/healthz',
        ),
      },
    ),
    contentType: fc.constantFrom<string | null>(
      'application/json',
      'application/json',
      'application/json',
      null,
      'text/plain',
      'application/json; charset=utf-16',
      'application/problem+json',
      'APPLICATION/JSON',
      'multipart/form-data; boundary=x',
      'application/x-www-form-urlencoded',
      '',
    ),
    body: controlBodyArb,
    framing: fc.constantFrom('cl', 'cl', 'cl', 'chunked', 'huge', 'none'),
    headers: fc.array(fc.tuple(headerNameArb, headerValueArb), { maxLength: 3 }),
  })
  .map((s): FuzzCase => {
    const hang = s.framing === 'huge';
    return {
      family: 'control-request',
      listener: 'control',
      methods: [s.method],
      hang,
      expect: 1,
      render: () => {
        const lines = [`${s.method} ${s.path} HTTP/1.1`, 'Host: x'];
        if (s.contentType !== null) lines.push(`Content-Type: ${s.contentType}`);
        for (const [n, v] of s.headers) if (n.toLowerCase() !== 'connection') lines.push(`${n}: ${v}`);
        const body = Buffer.from(s.body, 'utf8');
        let payload = Buffer.alloc(0);
        if (s.framing === 'cl') {
          lines.push(`Content-Length: ${body.length}`);
          payload = body;
        } else if (s.framing === 'chunked') {
          lines.push('Transfer-Encoding: chunked');
          payload = Buffer.concat([
            Buffer.from(`${body.length.toString(16)}\r\n`),
            body,
            Buffer.from('\r\n0\r\n\r\n'),
          ]);
          if (body.length === 0) payload = Buffer.from('0\r\n\r\n');
        } else if (s.framing === 'huge') {
          lines.push('Content-Length: 60000');
          payload = body.subarray(0, 100);
        }
        lines.push('Connection: close');
        return Buffer.concat([latin1(`${lines.join(CRLF)}${CRLF}${CRLF}`), payload]);
      },
    };
  });

export const caseArb: fc.Arbitrary<FuzzCase> = fc.oneof(
  { weight: 10, arbitrary: dataRequestArb },
  { weight: 3, arbitrary: smuggleArb },
  { weight: 2, arbitrary: malformedHeaderArb },
  { weight: 2, arbitrary: aliasArb },
  { weight: 7, arbitrary: controlCaseArb },
);
