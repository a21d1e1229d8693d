import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseDeleteObjects } from '../../src/gateway/kinds/s3/delete-objects.js';

const NS = 'http://s3.amazonaws.com/doc/2006-03-01/';
const enc = (s: string) => new TextEncoder().encode(s);
const parse = (s: string, limits?: { maxBytes: number; maxKeys: number }) =>
  parseDeleteObjects(enc(s), limits);
const keysOf = (s: string) => {
  const r = parse(s);
  if (!r.ok) throw new Error(r.reason);
  return r.keys;
};

function escapeXml(s: string): string {
  return s.replace(
    /[&<>"']/g,
    (c) => `&${{ '&': 'amp', '<': 'lt', '>': 'gt', '"': 'quot', "'": 'apos' }[c]};`,
  );
}

/** What @aws-sdk/client-s3 sends (one line, a declaration, the namespace). */
function sdkBody(keys: string[], quiet = false): string {
  const objects = keys.map((k) => `<Object><Key>${escapeXml(k)}</Key></Object>`).join('');
  return `<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="${NS}">${objects}${quiet ? '<Quiet>true</Quiet>' : ''}</Delete>`;
}

describe('DeleteObjects body parser', () => {
  it('reads the keys the SDK sends', () => {
    expect(keysOf(sdkBody(['a.pdf', '2024/03/b.pdf'], true))).toEqual(['a.pdf', '2024/03/b.pdf']);
  });

  it('accepts whitespace, no declaration, no namespace, version ids and conditional fields', () => {
    const body = `
      <Delete>
        <Quiet>false</Quiet>
        <Object>
          <Key>a</Key>
          <VersionId>3sL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY</VersionId>
        </Object>
        <Object><Key>b</Key><ETag>"x"</ETag><LastModifiedTime>2024-01-01T00:00:00Z</LastModifiedTime><Size>3</Size></Object>
      </Delete>
    `;
    expect(keysOf(body)).toEqual(['a', 'b']);
  });

  it('decodes the predefined entities and character references, keeps spaces', () => {
    expect(
      keysOf(
        `<Delete><Object><Key> a&amp;b&lt;c&gt;d&quot;e&apos;f&#65;&#x42;&#x1F600; </Key></Object></Delete>`,
      ),
    ).toEqual([` a&b<c>d"e'fAB\u{1F600} `]);
    expect(keysOf(`<Delete><Object><Key>line&#13;&#10;end</Key></Object></Delete>`)).toEqual(['line\r\nend']);
    expect(keysOf(`<Delete><Object><Key>café ☕ >x</Key></Object></Delete>`)).toEqual(['café ☕ >x']);
  });

  it('keeps repeated keys (locks are deduplicated later)', () => {
    expect(keysOf(sdkBody(['a', 'a']))).toEqual(['a', 'a']);
  });

  it('skips one leading byte-order mark', () => {
    expect(keysOf(`\uFEFF${sdkBody(['a'])}`)).toEqual(['a']);
  });

  it.each([
    ['a DOCTYPE', `<!DOCTYPE Delete [<!ENTITY x "y">]><Delete><Object><Key>&x;</Key></Object></Delete>`],
    [
      'a DOCTYPE after the declaration',
      `<?xml version="1.0"?><!DOCTYPE Delete><Delete><Object><Key>a</Key></Object></Delete>`,
    ],
    ['an unknown entity', `<Delete><Object><Key>&x;</Key></Object></Delete>`],
    ['a bare &', `<Delete><Object><Key>a&b</Key></Object></Delete>`],
    ['a reference to NUL', `<Delete><Object><Key>a&#0;</Key></Object></Delete>`],
    ['a reference past U+10FFFF', `<Delete><Object><Key>&#x110000;</Key></Object></Delete>`],
    ['a reference to a surrogate', `<Delete><Object><Key>&#xD800;</Key></Object></Delete>`],
    ['a raw control character', `<Delete><Object><Key>a\u0001</Key></Object></Delete>`],
    ['a raw CR in a key', `<Delete><Object><Key>a\rb</Key></Object></Delete>`],
    ['a comment', `<Delete><!-- x --><Object><Key>a</Key></Object></Delete>`],
    [
      'a comment hiding a key',
      `<Delete><Object><Key>a</Key></Object><!--<Object><Key>b</Key></Object>--></Delete>`,
    ],
    ['CDATA', `<Delete><Object><Key><![CDATA[a]]></Key></Object></Delete>`],
    ['a processing instruction', `<Delete><?x y?><Object><Key>a</Key></Object></Delete>`],
    [
      'a declaration in another encoding',
      `<?xml version="1.0" encoding="ISO-8859-1"?><Delete><Object><Key>a</Key></Object></Delete>`,
    ],
    [
      'a namespace prefix',
      `<s3:Delete xmlns:s3="${NS}"><s3:Object><s3:Key>a</s3:Key></s3:Object></s3:Delete>`,
    ],
    ['an attribute on Object', `<Delete><Object id="1"><Key>a</Key></Object></Delete>`],
    ['an attribute on Delete other than xmlns', `<Delete a="b"><Object><Key>a</Key></Object></Delete>`],
    ['an unknown element in Object', `<Delete><Object><Key>a</Key><Prefix>b</Prefix></Object></Delete>`],
    ['an unknown element in Delete', `<Delete><Prefix>a</Prefix><Object><Key>a</Key></Object></Delete>`],
    ['two keys in one Object', `<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>`],
    ['an Object without Key', `<Delete><Object><VersionId>1</VersionId></Object></Delete>`],
    ['an empty Key', `<Delete><Object><Key></Key></Object></Delete>`],
    ['a self-closed Key', `<Delete><Object><Key/></Object></Delete>`],
    ['a key over 1024 bytes', `<Delete><Object><Key>${'é'.repeat(513)}</Key></Object></Delete>`],
    ['markup in a Key', `<Delete><Object><Key>a<b/>c</Key></Object></Delete>`],
    ['text between elements', `<Delete>x<Object><Key>a</Key></Object></Delete>`],
    ['no Object', `<Delete></Delete>`],
    ['a self-closed Delete', `<Delete/>`],
    ['another root', `<Remove><Object><Key>a</Key></Object></Remove>`],
    ['mismatched tags', `<Delete><Object><Key>a</VersionId></Object></Delete>`],
    ['an unclosed document', `<Delete><Object><Key>a</Key></Object>`],
    ['content after the root', `<Delete><Object><Key>a</Key></Object></Delete><Delete/>`],
    [
      'a second root',
      `<Delete><Object><Key>a</Key></Object></Delete><Delete><Object><Key>b</Key></Object></Delete>`,
    ],
    ['an unquoted attribute', `<Delete xmlns=x><Object><Key>a</Key></Object></Delete>`],
    ['a duplicate attribute', `<Delete xmlns="a" xmlns="b"><Object><Key>a</Key></Object></Delete>`],
    ['two Quiet', `<Delete><Quiet>true</Quiet><Quiet>true</Quiet><Object><Key>a</Key></Object></Delete>`],
    ['an empty body', ``],
    ['a declaration only', `<?xml version="1.0"?>`],
    [
      'a declaration not at the start',
      ` <?xml version="1.0"?><Delete><Object><Key>a</Key></Object></Delete>`,
    ],
  ])('refuses %s', (_what, body) => {
    const r = parse(body);
    expect(r.ok).toBe(false);
  });

  it('refuses bytes that are not UTF-8', () => {
    const body = Buffer.concat([
      enc('<Delete><Object><Key>'),
      Buffer.from([0xe9]),
      enc('</Key></Object></Delete>'),
    ]);
    const r = parseDeleteObjects(body);
    expect(r.ok).toBe(false);
  });

  it('refuses more keys than the bound, and more bytes (as too large)', () => {
    const limits = { maxBytes: 1000, maxKeys: 3 };
    expect(parse(sdkBody(['a', 'b', 'c']), limits).ok).toBe(true);
    expect(parse(sdkBody(['a', 'b', 'c', 'd']), limits)).toMatchObject({ ok: false });
    const big = parse(sdkBody(['x'.repeat(1000)]), limits);
    expect(big).toMatchObject({ ok: false, tooLarge: true });
  });

  it('by default: 1000 keys pass, 1001 do not', () => {
    const keys = Array.from({ length: 1000 }, (_, i) => `k${i}`);
    expect(keysOf(sdkBody(keys))).toHaveLength(1000);
    expect(parse(sdkBody([...keys, 'one-more'])).ok).toBe(false);
  });

  it('round-trips any key the SDK could send', () => {
    const keyChar = fc
      .integer({ min: 0x20, max: 0x10ffff })
      .filter((cp) => cp < 0xd800 || (cp > 0xdfff && cp !== 0xfffe && cp !== 0xffff))
      .map((cp) => String.fromCodePoint(cp));
    const key = fc
      .array(fc.oneof(keyChar, fc.constantFrom('/', '&', '<', '>', '"', "'", ' ', '\t', '\n')), {
        minLength: 1,
        maxLength: 40,
      })
      .map((cs) => cs.join(''))
      .filter((k) => Buffer.byteLength(k) <= 1024);
    fc.assert(
      fc.property(fc.array(key, { minLength: 1, maxLength: 20 }), (keys) => {
        expect(keysOf(sdkBody(keys))).toEqual(keys);
      }),
    );
  });

  it('never throws on arbitrary input', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 200 }), (s) => {
        const r = parse(s);
        expect(typeof r.ok).toBe('boolean');
      }),
    );
  });
});
