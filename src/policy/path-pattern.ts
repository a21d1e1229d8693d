/**
 * Route paths: `/orders/:orderId`, `/orders/*`, `/invoices/*key`. A pattern is a list of
 * segments, each a literal or a `:param`, optionally ending in `*` (zero or more further
 * segments) or `*name` (the same, captured as parameter `name`: the further segments,
 * each percent-decoded once, joined with `/`; '' when there are none). Request paths
 * are normalised before matching (see splitRequestPath), in the direction that keeps
 * fencing on: variants an upstream would likely treat as the same resource
 * (`/orders//42/`, `/%6Frders/42`) match the same route.
 */
import { ownRecord } from '../own-record.js';

export type Segment = { kind: 'literal'; value: string } | { kind: 'param'; name: string };

export interface PathPattern {
  readonly source: string;
  readonly segments: readonly Segment[];
  /** True when the pattern ends in `*` or `*name`. */
  readonly wildcard: boolean;
  /** `name` when the pattern ends in `*name` (also listed in `params`), else null. */
  readonly rest?: string | null;
  readonly params: readonly string[];
  /** Anchored rules a parameter's decoded value must match (a route's `params`), or null. */
  readonly constraints?: Readonly<Record<string, RegExp>> | null;
}

const PARAM = /^:([A-Za-z_][A-Za-z0-9_]*)$/;
const REST = /^\*([A-Za-z_][A-Za-z0-9_]*)$/;
// RFC 3986 pchar without "%" (patterns name decoded segments) and without ":" (parameters only).
const LITERAL = /^[A-Za-z0-9._~!$&'()+,;=@-]+$/;

export type PatternParse = { ok: true; pattern: PathPattern } | { ok: false; reason: string };

export function parsePathPattern(source: string): PatternParse {
  if (!source.startsWith('/')) return { ok: false, reason: 'must start with "/"' };
  if (source === '/') return { ok: true, pattern: { source, segments: [], wildcard: false, params: [] } };
  if (source.endsWith('/'))
    return { ok: false, reason: 'must not end with "/" (use "/*" to match below a prefix)' };
  const parts = source.slice(1).split('/');
  const segments: Segment[] = [];
  const params: string[] = [];
  let wildcard = false;
  let rest: string | null = null;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i] ?? '';
    if (part === '*') {
      if (i !== parts.length - 1) return { ok: false, reason: '"*" is only allowed as the last segment' };
      wildcard = true;
    } else if (part.startsWith('*') && REST.test(part)) {
      if (i !== parts.length - 1)
        return { ok: false, reason: `"${part}" is only allowed as the last segment` };
      const name = part.slice(1);
      if (params.includes(name)) return { ok: false, reason: `parameter "${name}" appears twice` };
      params.push(name);
      wildcard = true;
      rest = name;
    } else if (part.length === 0) {
      return { ok: false, reason: 'must not contain empty segments ("//")' };
    } else if (part.startsWith(':')) {
      const m = PARAM.exec(part);
      if (!m?.[1])
        return { ok: false, reason: `invalid parameter "${part}": use ":name" as a whole segment` };
      if (params.includes(m[1])) return { ok: false, reason: `parameter ":${m[1]}" appears twice` };
      params.push(m[1]);
      segments.push({ kind: 'param', name: m[1] });
    } else if (part === '.' || part === '..') {
      return { ok: false, reason: 'must not contain "." or ".." segments' };
    } else if (!LITERAL.test(part) || part.includes('*')) {
      return { ok: false, reason: `segment "${part}" has characters not allowed in a path` };
    } else {
      segments.push({ kind: 'literal', value: part });
    }
  }
  return { ok: true, pattern: { source, segments, wildcard, rest, params } };
}

export type ConstrainResult =
  { ok: true; pattern: PathPattern } | { ok: false; errors: { param: string; reason: string }[] };

/**
 * `pattern` whose parameters must also match `rules` (name → regular expression, matched
 * against the whole decoded value, as if written `^(?:rule)$`, with the `u` flag). A
 * value that does not match makes the route not match: `params: {id: '[0-9]{1,12}'}`
 * keeps `/orders/7058.json` and `/orders/%EF%BC%97` off a route locked by `{id}`.
 */
export function constrainParams(
  pattern: PathPattern,
  rules: Readonly<Record<string, string>>,
): ConstrainResult {
  const errors: { param: string; reason: string }[] = [];
  const constraints = Object.create(null) as Record<string, RegExp>;
  for (const [param, rule] of Object.entries(rules)) {
    if (!pattern.params.includes(param)) {
      errors.push({ param, reason: `the path has no parameter "${param}"` });
      continue;
    }
    try {
      constraints[param] = new RegExp(`^(?:${rule})$`, 'u');
    } catch (err) {
      errors.push({ param, reason: `invalid regular expression: ${(err as Error).message}` });
    }
  }
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, pattern: { ...pattern, constraints } };
}

export type RequestPath = { ok: true; segments: string[] } | { ok: false; reason: string };

/**
 * Characters a request path may carry raw (RFC 3986 pchar, "/" and "%"). Anything else,
 * "#" above all, is refused: a client (or undici) may cut or re-encode it, so the path
 * the fence was computed on would not be the path the upstream applies the write to.
 */
const RAW_PATH_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@%/";
/** 1 for each ASCII code a raw path may carry (RAW_PATH_CHARS): one lookup per character. */
const RAW_PATH = new Uint8Array(128);
for (let i = 0; i < RAW_PATH_CHARS.length; i++) RAW_PATH[RAW_PATH_CHARS.charCodeAt(i)] = 1;
const SLASH = 0x2f;
const PERCENT = 0x25;

/**
 * Splits a raw request path (no query) into decoded segments. Empty segments are
 * dropped (so `//` and a trailing `/` do not matter); dot segments, encoded "/" or
 * "\\", NUL and bad percent-encoding are refused rather than guessed at.
 *
 * A pass to check the characters and one to split, with no regular expression and no
 * intermediate array: it runs on every request, before routing (a profile of a
 * stale-write flood had the regular expression and `split` at a sixth of fencegate's
 * own time per refusal).
 */
export function splitRequestPath(rawPath: string): RequestPath {
  const n = rawPath.length;
  if (n === 0 || rawPath.charCodeAt(0) !== SLASH) return { ok: false, reason: 'path must start with "/"' };
  for (let i = 1; i < n; i++) {
    const c = rawPath.charCodeAt(i);
    if (c >= 128 || RAW_PATH[c] === 0) {
      return { ok: false, reason: 'path has characters that must be percent-encoded (such as "#")' };
    }
  }
  const segments: string[] = [];
  let from = 1;
  let encoded = false;
  for (let i = 1; i <= n; i++) {
    const c = i < n ? rawPath.charCodeAt(i) : SLASH;
    if (c === PERCENT) encoded = true;
    if (c !== SLASH) continue;
    if (i > from) {
      const refused = pushSegment(segments, rawPath.slice(from, i), encoded, i < n);
      if (refused !== null) return { ok: false, reason: refused };
    }
    from = i + 1;
    encoded = false;
  }
  return { ok: true, segments };
}

/**
 * Decodes one raw segment onto `segments`; the reason it is refused, or null.
 * `followed`: a "/" comes after it.
 */
function pushSegment(segments: string[], raw: string, encoded: boolean, followed: boolean): string | null {
  // Without a "%" a segment is its own decoding, and RAW_PATH already kept "/", "\\" and
  // NUL out of it: only an encoded segment is decoded and checked for them.
  let decoded = raw;
  if (encoded) {
    try {
      decoded = decodeURIComponent(raw);
    } catch {
      return 'path has invalid percent-encoding';
    }
    if (/[/\\\0]/.test(decoded)) return 'path segments must not encode "/", "\\" or NUL';
  }
  if (decoded === '.' || decoded === '..') return 'path must not contain dot segments';
  // "/.." or "../" in the decoded path (`/orders/..x`, `/a../b`, `/orders/x../`): many
  // servers and proxies treat such a path as traversal. Refused here, before routing,
  // so the fence never moves for a write the path might not reach.
  if (decoded.startsWith('..') || (decoded.endsWith('..') && followed))
    return 'path has ".." at the edge of a segment';
  segments.push(decoded);
  return null;
}

/**
 * Parameters of a match (decoded), or null when the pattern does not match. Parameter
 * names are the policy author's (`:__proto__`, `:constructor` are valid): an own record.
 */
export function matchPath(pattern: PathPattern, segments: readonly string[]): Record<string, string> | null {
  const fixed = pattern.segments.length;
  if (pattern.wildcard ? segments.length < fixed : segments.length !== fixed) return null;
  const params = ownRecord<string>();
  const rules = pattern.constraints;
  for (let i = 0; i < fixed; i++) {
    const seg = pattern.segments[i];
    const value = segments[i];
    if (seg === undefined || value === undefined) return null;
    if (seg.kind === 'literal') {
      if (seg.value !== value) return null;
    } else {
      if (rules != null && rules[seg.name]?.test(value) === false) return null;
      params[seg.name] = value;
    }
  }
  if (pattern.rest) {
    const rest = segments.slice(fixed).join('/');
    if (rules != null && rules[pattern.rest]?.test(rest) === false) return null;
    params[pattern.rest] = rest;
  }
  return params;
}
