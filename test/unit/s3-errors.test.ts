/**
 * The S3 `<Error>` documents refusals on s3 routes are written as (src/gateway/kinds/s3/errors.ts):
 * their exact shape, XML escaping, and the code table, held to docs/s3.md both ways.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PROBLEMS, ProblemError, type ProblemCode } from '../../src/errors.js';
import {
  escapeXml,
  s3ErrorCode,
  s3ErrorCodes,
  s3ErrorXml,
  s3ProblemFormat,
  S3_ERROR_CODES,
} from '../../src/gateway/kinds/s3/errors.js';

const DECLARATION = '<?xml version="1.0" encoding="UTF-8"?>\n';

describe('s3ErrorXml', () => {
  it("is S3's <Error> with the code, the detail, the problem type, the fields and the request id", () => {
    const problem = new ProblemError('stale-token', 'token 41 is older than 42', {
      lock: 'invoice:a.pdf',
      token: 41n,
      highest: 42n,
    });
    expect(s3ErrorXml(problem, 'req-1')).toBe(
      DECLARATION +
        '<Error><Code>StaleFencingToken</Code><Message>token 41 is older than 42</Message>' +
        '<Type>urn:fencegate:stale-token</Type><Lock>invoice:a.pdf</Lock><Token>41</Token>' +
        '<Highest>42</Highest><RequestId>req-1</RequestId></Error>',
    );
    // Made once per problem, with each request's own id.
    expect(s3ErrorXml(problem, 'req-2')).toContain(
      '<Highest>42</Highest><RequestId>req-2</RequestId></Error>',
    );
  });

  it('gives the title as the message when there is no detail, and skips fields that are undefined', () => {
    const xml = s3ErrorXml(
      new ProblemError('token-required', undefined, { lock: 'k', token: undefined }),
      'r',
    );
    expect(xml).toContain(`<Message>${PROBLEMS['token-required'].title}</Message>`);
    expect(xml).not.toContain('<Token>');
  });

  it('writes numbers, booleans and objects as text, and takes the request id only once', () => {
    const xml = s3ErrorXml(
      new ProblemError('internal', 'internal error', {
        requestId: 'r-9',
        retryAfterMs: 1500,
        queued: true,
        blockedBy: { lease: 'x' },
      }),
      'r-9',
    );
    expect(xml).toContain(
      '<RetryAfterMs>1500</RetryAfterMs><Queued>true</Queued><BlockedBy>{&quot;lease&quot;:&quot;x&quot;}</BlockedBy>',
    );
    expect(xml.match(/<RequestId>/g)).toHaveLength(1);
    expect(xml).toContain('<Code>InternalError</Code>');
  });

  it('escapes markup, keeps a CR as a reference, and replaces what XML cannot carry', () => {
    expect(escapeXml(`a<b>&"c"'d'\r\ne\tf`)).toBe('a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;&#13;\ne\tf');
    expect(escapeXml('x\u0000y\u001bz\uFFFEw\uD800v')).toBe('x\uFFFDy\uFFFDz\uFFFDw\uFFFDv');
    expect(escapeXml('größe ☃ 😀')).toBe('größe ☃ 😀');
    const problem = new ProblemError('bad-request', 'no <route> for </Error>&', { lock: ']]><x/>' });
    const xml = s3ErrorXml(problem, '<id>');
    expect(xml).toContain('<Message>no &lt;route&gt; for &lt;/Error&gt;&amp;</Message>');
    expect(xml).toContain('<Lock>]]&gt;&lt;x/&gt;</Lock>');
    expect(xml).toContain('<RequestId>&lt;id&gt;</RequestId>');
    expect(xml.match(/<\/Error>/g)).toHaveLength(1);
  });

  it('is answered as application/xml with x-amz-request-id', () => {
    const out = s3ProblemFormat.render(new ProblemError('no-route', 'none'), 'abc');
    expect(s3ProblemFormat.contentType).toBe('application/xml');
    expect(out.headers).toEqual({ 'x-amz-request-id': 'abc' });
    expect(out.body).toContain('<Code>NoRoute</Code>');
  });
});

describe('the S3 code table', () => {
  it('gives every fencegate code its own S3 code, in PascalCase', () => {
    const codes = s3ErrorCodes();
    expect(codes.map(([code]) => code)).toEqual(Object.keys(PROBLEMS));
    for (const [, s3] of codes) expect(s3).toMatch(/^[A-Z][A-Za-z]+$/);
    expect(new Set(codes.map(([, s3]) => s3)).size).toBe(codes.length);
  });

  it('names the fencing refusals after the token; codes not listed get their name in PascalCase', () => {
    expect(s3ErrorCode('stale-token')).toBe('StaleFencingToken');
    expect(s3ErrorCode('token-required')).toBe('FencingTokenRequired');
    expect(s3ErrorCode('lock-held')).toBe('LockHeld');
    expect(s3ErrorCode('method-not-allowed')).toBe('MethodNotAllowed');
  });

  it('is the table in docs/s3.md, both ways', () => {
    const doc = readFileSync(new URL('../../docs/s3.md', import.meta.url), 'utf8');
    const documented = new Map(
      [...doc.matchAll(/^\|\s*`([A-Za-z]+)`\s*\|\s*`([a-z-]+)`\s*\|\s*(\d{3})\s*\|/gm)].map((m) => [
        m[2] as ProblemCode,
        { s3: m[1], status: Number(m[3]) },
      ]),
    );
    const listed = Object.entries(S3_ERROR_CODES) as [ProblemCode, string][];
    expect(documented.size).toBe(listed.length);
    for (const [code, s3] of listed) {
      expect(documented.get(code), `docs/s3.md lacks ${code}`).toEqual({ s3, status: PROBLEMS[code].status });
    }
  });
});
