import { describe, expect, it } from 'vitest';
import {
  connectionTokens,
  forwardingHeaders,
  rawHeaderValues,
  readFencingToken,
  stripRequestHeaders,
  stripResponseHeaders,
} from '../../src/gateway/headers.js';

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
  });
});
