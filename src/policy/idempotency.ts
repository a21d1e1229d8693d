/**
 * A route's `idempotency` (docs/gateway.md, "Idempotency"; docs/policy.md): which header
 * carries the key and how long an answer is replayed. Checked here beyond the schema:
 * the header's name, and that the route's kind can keep and replay its answers.
 */
import type { PolicyKind, PolicyKinds } from './kinds.js';
import { DEFAULTS, type IdempotencySettings } from './model.js';
import type { RawIdempotency, RawRoute } from './schema.js';

/** RFC 9110 token characters, without `_` (the gateway drops header names with `_`, as nginx does). */
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^`|~-]{1,64}$/;

/** Headers with a meaning of their own to the gateway or to HTTP: never a key's carrier. */
const RESERVED = new Set([
  'fencing-token',
  'fencing-sequencer',
  'host',
  'content-length',
  'content-type',
  'transfer-encoding',
  'connection',
  'expect',
  'upgrade',
  'te',
  'trailer',
  'authorization',
  'cookie',
]);

/** The methods a key is honoured on: every one but the safe ones (their retries repeat nothing). */
export function idempotentMethod(method: string): boolean {
  return method !== 'GET' && method !== 'HEAD' && method !== 'OPTIONS';
}

export type IdempotencyCompileResult =
  { ok: true; settings: IdempotencySettings | null } | { ok: false; field: string[]; message: string };

export function compileIdempotency(
  raw: RawRoute,
  kind: PolicyKind | null,
  kinds: PolicyKinds,
): IdempotencyCompileResult {
  const given: RawIdempotency | undefined = raw.idempotency;
  if (given === undefined) return { ok: true, settings: null };
  if (kind !== null && kind.replayable !== true) {
    const able = Object.values(kinds)
      .filter((k) => k.replayable === true)
      .map((k) => k.name)
      .join(', ');
    const message = `routes of a "${kind.name}" upstream cannot replay answers (only ${able} routes take "idempotency")`;
    return { ok: false, field: ['idempotency'], message };
  }
  const header = given.header ?? DEFAULTS.idempotency.header;
  if (!HEADER_NAME.test(header)) {
    const message = `"${header}" is not a header name (1-64 letters, digits or !#$%&'*+.^\`|~-; no "_")`;
    return { ok: false, field: ['idempotency', 'header'], message };
  }
  if (RESERVED.has(header.toLowerCase())) {
    return {
      ok: false,
      field: ['idempotency', 'header'],
      message: `"${header}" has another meaning: pick another header`,
    };
  }
  if (!raw.methods.some(idempotentMethod)) {
    const message =
      'the route takes only GET, HEAD or OPTIONS, whose retries repeat nothing: remove "idempotency"';
    return { ok: false, field: ['idempotency'], message };
  }
  return {
    ok: true,
    settings: { header: header.toLowerCase(), ttlMs: given.ttlMs ?? DEFAULTS.idempotency.ttlMs },
  };
}
