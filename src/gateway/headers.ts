/**
 * Header hygiene for the proxy. Order matters: hop-by-hop headers, headers named in
 * `Connection`, client-supplied copies of every header the gateway sets, method and
 * path overrides, and names with "_" are removed first; only then does the gateway add
 * its own. So `Connection:
 * fencing-token` cannot strip the token the gateway forwards, and a client cannot
 * forge `x-fencegate-*` or `forwarded` headers.
 */
import { parseToken, type FencingToken } from '../tokens.js';
import type { HeaderLookup } from '../policy/index.js';
import { HTTP_METHODS } from '../policy/schema.js';
import { ownRecord } from '../own-record.js';

/** RFC 9110 §7.6.1 connection-specific fields, plus the de-facto Proxy-Connection. */
export const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export const FENCING_TOKEN = 'fencing-token';
/** A signed sequencer (check: sequencer). A bearer credential for its lease: never forwarded. */
export const FENCING_SEQUENCER = 'fencing-sequencer';
export const GATEWAY_PREFIX = 'x-fencegate-';

/**
 * Headers some frameworks read as the "real" method or path (Rails, Laravel, Express's
 * method-override, IIS's URL rewrite): a GET carrying `X-HTTP-Method-Override: PUT` would
 * be routed and fenced as a read and applied as a write. Never forwarded.
 */
export const METHOD_OVERRIDE_HEADERS = [
  'x-http-method-override',
  'x-http-method',
  'x-method-override',
] as const;
export const OVERRIDE_HEADERS = new Set<string>([
  ...METHOD_OVERRIDE_HEADERS,
  'x-original-url',
  'x-rewrite-url',
]);

/**
 * The method the request's method-override headers name, uppercased: null when it has
 * none; an error when they are repeated with different values or name no method a
 * route can declare.
 */
export function overridingMethod(
  rawHeaders: readonly string[],
): { ok: true; method: string | null } | { ok: false; reason: string } {
  let method: string | null = null;
  for (const name of METHOD_OVERRIDE_HEADERS) {
    for (const value of rawHeaderValues(rawHeaders, name)) {
      const m = value.trim().toUpperCase();
      if (!(HTTP_METHODS as readonly string[]).includes(m))
        return { ok: false, reason: `${name} names no method a route can declare: "${value}"` };
      if (method !== null && m !== method)
        return { ok: false, reason: `method-override headers name two methods (${method}, ${m})` };
      method = m;
    }
  }
  return { ok: true, method };
}

/**
 * Request headers the gateway answers itself and never forwards: `Expect` (the
 * gateway sends 100 Continue only once the fence admitted the write; undici, the
 * upstream client, refuses `expect` anyway).
 */
export const CONSUMED_BY_GATEWAY = new Set(['expect']);

type HeaderValue = string | string[] | number | undefined;
export type Headers = Record<string, HeaderValue>;

/** Header names listed in a Connection header value (lower-cased, trimmed). */
export function connectionTokens(value: HeaderValue): string[] {
  if (value === undefined) return [];
  const joined = Array.isArray(value) ? value.join(',') : String(value);
  return joined
    .split(',')
    .map((t) => t.trim().toLowerCase())
    .filter((t) => t.length > 0);
}

/** Every value of a header as the client sent it (Node joins repeats in `headers`; rawHeaders keeps them). */
export function rawHeaderValues(rawHeaders: readonly string[], name: string): string[] {
  const values: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const field = rawHeaders[i]!;
    // Lower-cased only when the length matches: the other headers of every request make no string.
    if (field.length === name.length && field.toLowerCase() === name) values.push(rawHeaders[i + 1] ?? '');
  }
  return values;
}

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * A header value as UTF-8 text. Node hands header bytes over as latin1 (one char per
 * byte); a lock rendered from that would read `é` (C3 A9) as `Ã©` and collide with a
 * tenant literally named `Ã©`. So the bytes are decoded as UTF-8, strictly: invalid
 * UTF-8 (e.g. a bare latin1 `é`, E9) is refused rather than guessed at, and a BOM is
 * kept as a character, so distinct byte strings always give distinct text.
 */
export function decodeHeaderUtf8(value: string): { ok: true; value: string } | { ok: false } {
  // Node never yields chars above U+00FF here; anything else did not come from the wire as bytes.
  if (/[\u0100-\uffff]/.test(value)) return { ok: false };
  try {
    return { ok: true, value: UTF8.decode(Buffer.from(value, 'latin1')) };
  } catch {
    return { ok: false };
  }
}

export type PresentedToken =
  { kind: 'missing' } | { kind: 'malformed'; reason: string } | { kind: 'ok'; token: FencingToken };

export function readFencingToken(rawHeaders: readonly string[]): PresentedToken {
  const values = rawHeaderValues(rawHeaders, FENCING_TOKEN);
  if (values.length === 0) return { kind: 'missing' };
  if (values.length > 1)
    return { kind: 'malformed', reason: `${values.length} Fencing-Token headers; send exactly one` };
  const parsed = parseToken(values[0]);
  return parsed.ok ? { kind: 'ok', token: parsed.token } : { kind: 'malformed', reason: parsed.reason };
}

export type PresentedSequencer =
  { kind: 'missing' } | { kind: 'malformed'; reason: string } | { kind: 'ok'; sequencer: string };

export function readFencingSequencer(rawHeaders: readonly string[]): PresentedSequencer {
  const values = rawHeaderValues(rawHeaders, FENCING_SEQUENCER);
  if (values.length === 0) return { kind: 'missing' };
  if (values.length > 1)
    return { kind: 'malformed', reason: `${values.length} Fencing-Sequencer headers; send exactly one` };
  return { kind: 'ok', sequencer: (values[0] ?? '').trim() };
}

/** Headers only the gateway may set towards the upstream. */
export function isGatewayOwned(name: string): boolean {
  return name.startsWith(GATEWAY_PREFIX) || name === 'forwarded' || name.startsWith('x-forwarded-');
}

/**
 * Removes hop-by-hop headers, headers named in the client's `Connection` header,
 * gateway-owned headers and any extra names (e.g. `fencing-token` on fenced routes).
 * Returns a new object; the input is not changed.
 */
export function stripRequestHeaders(
  headers: Headers,
  connection: HeaderValue,
  extra: readonly string[] = [],
  /** Forward method-override headers (the request was routed by the method they name). */
  keepMethodOverride = false,
): Headers {
  // The common case (no Connection header, at most one extra name) builds no Set.
  const listed = connection === undefined ? null : connectionTokens(connection);
  const drop = listed === null || listed.length === 0 ? null : new Set([...listed, ...extra]);
  // Header names are the client's: "__proto__" must stay a name like any other.
  const out: Headers = ownRecord<HeaderValue>();
  for (const name of Object.keys(headers)) {
    const value = headers[name];
    const lower = name.toLowerCase();
    if (value === undefined || HOP_BY_HOP.has(lower)) continue;
    if (drop !== null ? drop.has(lower) : extra.includes(lower)) continue;
    if (isGatewayOwned(lower) || CONSUMED_BY_GATEWAY.has(lower)) continue;
    if (OVERRIDE_HEADERS.has(lower) && !(keepMethodOverride && isMethodOverride(lower))) continue;
    // As nginx does by default: `fencing_token` or `x_fencegate_lock` would reach frameworks
    // that fold "_" into "-" (CGI, WSGI, Rack) as the real header the gateway removed.
    if (lower.includes('_')) continue;
    out[lower] = value;
  }
  return out;
}

/**
 * An answer's raw header list (undici's name/value buffers) as an object: lower-cased
 * names, a repeated header's values in an array, in order (as undici's own responses).
 */
export function headersFromRaw(rawHeaders: readonly Buffer[]): Headers {
  const out = ownRecord<string | string[]>();
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = (rawHeaders[i] as Buffer).toString('latin1').toLowerCase();
    const value = (rawHeaders[i + 1] as Buffer).toString('latin1');
    const seen = out[name];
    if (seen === undefined) out[name] = value;
    else if (Array.isArray(seen)) seen.push(value);
    else out[name] = [seen, value];
  }
  return out;
}

/**
 * Removes hop-by-hop headers, those the upstream named in its `Connection` header, and
 * `x-fencegate-*` (only the gateway speaks for itself to the client).
 */
export function stripResponseHeaders<T extends Headers>(headers: T): T {
  const connection = headers.connection;
  const drop = connection === undefined ? null : new Set(connectionTokens(connection));
  const out: Headers = ownRecord<HeaderValue>();
  for (const name of Object.keys(headers)) {
    const value = headers[name];
    const lower = name.toLowerCase();
    if (value === undefined || HOP_BY_HOP.has(lower) || drop?.has(lower) === true) continue;
    if (lower.startsWith(GATEWAY_PREFIX)) continue;
    out[name] = value;
  }
  return out as T;
}

export interface ForwardingInfo {
  /** Address of the peer that connected to the gateway. */
  peer: string;
  /** "http" or "https", as the gateway determined it. */
  proto: string;
  /** Host the client asked for, if any. */
  host: string | undefined;
  /** With trustProxy, the incoming X-Forwarded-For / Forwarded chains are kept and extended. */
  trustProxy: boolean;
  incomingXff: HeaderValue;
  incomingForwarded: HeaderValue;
}

/** X-Forwarded-* and RFC 7239 Forwarded headers for the upstream. */
export function forwardingHeaders(info: ForwardingInfo): Record<string, string> {
  const xff = info.trustProxy ? joinChain(info.incomingXff, info.peer) : info.peer;
  const element = [
    `for=${quote(info.peer.includes(':') ? `[${info.peer}]` : info.peer)}`,
    `proto=${info.proto}`,
  ];
  if (info.host !== undefined) element.push(`host=${quote(info.host)}`);
  const forwarded = info.trustProxy
    ? joinChain(info.incomingForwarded, element.join(';'))
    : element.join(';');
  const out: Record<string, string> = { 'x-forwarded-for': xff, 'x-forwarded-proto': info.proto, forwarded };
  if (info.host !== undefined) out['x-forwarded-host'] = info.host;
  return out;
}

function joinChain(incoming: HeaderValue, next: string): string {
  const prior =
    incoming === undefined ? '' : Array.isArray(incoming) ? incoming.join(', ') : String(incoming);
  return prior.trim().length > 0 ? `${prior}, ${next}` : next;
}

function quote(value: string): string {
  // Most values (addresses, host names) need no escape: no regex replace per request for them.
  if (!value.includes('"') && !value.includes('\\')) return `"${value}"`;
  return `"${value.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/** A header used in a lock template must be sent exactly once, as valid UTF-8 (see decodeHeaderUtf8). */
export function headerLookup(rawHeaders: readonly string[]): HeaderLookup {
  return (name) => {
    const values = rawHeaderValues(rawHeaders, name);
    if (values.length === 0) return { ok: false, reason: `header "${name}" is missing` };
    if (values.length > 1) return { ok: false, reason: `header "${name}" is sent ${values.length} times` };
    const decoded = decodeHeaderUtf8(values[0] ?? '');
    if (!decoded.ok) return { ok: false, reason: `header "${name}" is not valid UTF-8` };
    return { ok: true, value: decoded.value };
  };
}

function isMethodOverride(lowerName: string): boolean {
  return (METHOD_OVERRIDE_HEADERS as readonly string[]).includes(lowerName);
}
