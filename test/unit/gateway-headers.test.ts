import { describe, expect, it } from 'vitest';
import {
  connectionTokens,
  decodeHeaderUtf8,
  headerLookup,
  forwardingHeaders,
  rawHeaderValues,
  readFencingToken,
  stripRequestHeaders,
  stripResponseHeaders,
} from '../../src/gateway/headers.js';
import { inheritsNothing } from '../helpers/own-record.js';

describe('Fencing-Token parsing from raw headers', () => {
  it('missing, one, several (any case), malformed', () => {
    expect(readFencingToken(['Host', 'x'])).toEqual({ kind: 'missing' });
    expect(readFencingToken(['Fencing-Token', '42'])).toEqual({ kind: 'ok', token: 42n });
    expect(readFencingToken(['fencing-token', '42', 'FENCING-TOKEN', '42'])).toMatchObject({
      kind: 'malformed',
    });
    expect(readFencingToken(['Fencing-Token', '042'])).toEqual({
      kind: 'malformed',
      reason: 'token must not have leading zeros',
    });
    expect(readFencingToken(['Fencing-Token', ''])).toEqual({ kind: 'malformed', reason: 'token is empty' });
  });

  it('rawHeaderValues keeps repeats that Node joins in req.headers', () => {
    expect(rawHeaderValues(['X-A', '1', 'x-a', '2', 'X-B', '3'], 'x-a')).toEqual(['1', '2']);
    // In any case; a name that only shares a prefix or a length is not the header.
    const raw = ['FENCING-TOKEN', '7', 'Fencing-Tokens', '8', 'Fencing-Tokem', '9', 'fencing-token', '10'];
    expect(rawHeaderValues(raw, 'fencing-token')).toEqual(['7', '10']);
  });
});

describe('request header stripping', () => {
  const incoming = {
    host: 'upstream:9000',
    connection: 'fencing-token, X-Custom',
    'x-custom': 'c',
    'keep-alive': 'timeout=5',
    'proxy-connection': 'keep-alive',
    'proxy-authorization': 'Basic x',
    te: 'trailers',
    trailer: 'x-t',
    'transfer-encoding': 'chunked',
    upgrade: 'websocket',
    'fencing-token': '41',
    'x-fencegate-fence': 'admitted',
    forwarded: 'for=evil',
    'x-forwarded-for': '6.6.6.6',
    'content-type': 'application/json',
  };

  it('removes hop-by-hop, Connection-named and gateway-owned headers, without touching the input', () => {
    const before = JSON.stringify(incoming);
    const out = stripRequestHeaders(incoming, incoming.connection);
    expect(out).toEqual({ host: 'upstream:9000', 'content-type': 'application/json' });
    expect(JSON.stringify(incoming)).toBe(before);
  });

  it('extra names are removed too (fencing-token on fenced routes)', () => {
    const out = stripRequestHeaders({ 'fencing-token': '1', a: 'b' }, undefined, ['fencing-token']);
    expect(out).toEqual({ a: 'b' });
  });

  it('a client Fencing-Token survives on unfenced routes unless named in Connection', () => {
    expect(stripRequestHeaders({ 'fencing-token': '1' }, undefined)).toEqual({ 'fencing-token': '1' });
  });

  it('connectionTokens handles lists, repeats and case', () => {
    expect(connectionTokens(['close, X-A', ' x-b '])).toEqual(['close', 'x-a', 'x-b']);
    expect(connectionTokens(undefined)).toEqual([]);
  });

  it('response: strips hop-by-hop and headers the upstream named in Connection', () => {
    const out = stripResponseHeaders({
      connection: 'x-internal',
      'x-internal': 'secret',
      'keep-alive': 'timeout=5',
      'transfer-encoding': 'chunked',
      'content-type': 'text/plain',
    });
    expect(out).toEqual({ 'content-type': 'text/plain' });
  });
});

describe('forwarding headers', () => {
  const base = { proto: 'http', host: 'shop.example', incomingXff: '6.6.6.6', incomingForwarded: 'for=evil' };

  it('untrusted peer: the chain starts at the peer', () => {
    expect(forwardingHeaders({ ...base, peer: '10.0.0.1', trustProxy: false })).toEqual({
      'x-forwarded-for': '10.0.0.1',
      'x-forwarded-proto': 'http',
      'x-forwarded-host': 'shop.example',
      forwarded: 'for="10.0.0.1";proto=http;host="shop.example"',
    });
  });

  it('trusted peer: the chain is extended; IPv6 is bracketed and quoted', () => {
    const out = forwardingHeaders({ ...base, peer: '::1', trustProxy: true });
    expect(out['x-forwarded-for']).toBe('6.6.6.6, ::1');
    expect(out.forwarded).toBe('for=evil, for="[::1]";proto=http;host="shop.example"');
  });

  it('quotes host values safely', () => {
    expect(forwardingHeaders({ ...base, host: 'a"b\\c', peer: '1.2.3.4', trustProxy: false }).forwarded).toBe(
      'for="1.2.3.4";proto=http;host="a\\"b\\\\c"',
    );
    expect(forwardingHeaders({ ...base, host: 'a\\b', peer: '1.2.3.4', trustProxy: false }).forwarded).toBe(
      'for="1.2.3.4";proto=http;host="a\\\\b"',
    );
  });
});

describe('header values as UTF-8 (Node hands them over as latin1)', () => {
  const latin1 = (text: string) => Buffer.from(text, 'utf8').toString('latin1');

  it('decodes UTF-8 bytes to the text they encode; ASCII is unchanged', () => {
    expect(decodeHeaderUtf8(latin1('é'))).toEqual({ ok: true, value: 'é' });
    expect(decodeHeaderUtf8(latin1('Ã©'))).toEqual({ ok: true, value: 'Ã©' });
    expect(decodeHeaderUtf8(latin1('日本😀'))).toEqual({ ok: true, value: '日本😀' });
    expect(decodeHeaderUtf8('acme-42')).toEqual({ ok: true, value: 'acme-42' });
  });

  it('distinct bytes give distinct text: a BOM is kept, not dropped', () => {
    expect(decodeHeaderUtf8(latin1('\ufeffa'))).toEqual({ ok: true, value: '\ufeffa' });
  });

  it('refuses bytes that are not UTF-8 (bare latin1, truncated, surrogates, overlong)', () => {
    for (const bytes of [[0xe9], [0xc3], [0xed, 0xa0, 0x80], [0xc0, 0xaf], [0xff]]) {
      expect(decodeHeaderUtf8(Buffer.from(bytes).toString('latin1')), String(bytes)).toEqual({ ok: false });
    }
    expect(decodeHeaderUtf8('\u0100')).toEqual({ ok: false });
  });

  it('the lock template lookup decodes, and refuses invalid UTF-8 with a reason', () => {
    const lookup = headerLookup(['X-Tenant', latin1('é')]);
    expect(lookup('x-tenant')).toEqual({ ok: true, value: 'é' });
    expect(headerLookup(['X-Tenant', '\u00e9'])('x-tenant')).toEqual({
      ok: false,
      reason: 'header "x-tenant" is not valid UTF-8',
    });
    expect(headerLookup(['__proto__', 'x'])('__proto__')).toEqual({ ok: true, value: 'x' });
  });
});

describe('gateway-owned and consumed request headers', () => {
  it('x-fencegate-lock (and any x-fencegate-*) and Expect never pass from the client', () => {
    const out = stripRequestHeaders(
      { 'x-fencegate-lock': 'order%3A1', 'X-Fencegate-Lock': 'x', expect: '100-continue', 'x-keep': '1' },
      undefined,
    );
    expect({ ...out }).toEqual({ 'x-keep': '1' });
  });

  it('header names like Object.prototype members are ordinary names', () => {
    const headers = JSON.parse('{"__proto__": "p", "constructor": "c", "hasOwnProperty": "h"}') as Record<
      string,
      string
    >;
    const out = stripRequestHeaders(headers, undefined);
    // "__proto__" is dropped for its "_" (as every such name is), not because it is special.
    expect(Object.keys(out).sort()).toEqual(['constructor', 'hasownproperty']);
    expect(inheritsNothing(out)).toBe(true);
    expect(out['constructor']).toBe('c');
    expect(out['toString']).toBeUndefined();
  });
});
