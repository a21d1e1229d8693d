/**
 * Request-body validation for the issuer API. Hand-written rather than fastify's
 * schema validation because fastify's default Ajv coerces types ("100" → 100),
 * and a lock service should refuse a body it did not clearly understand.
 * Validators never mutate their input; failures are ProblemErrors with a field.
 */
import { ProblemError } from '../errors.js';
import { MAX_KEYS_PER_ACQUIRE, type IssuerLimits } from './service.js';
import { checkLockKey } from '../lock-keys.js';

type Body = Record<string, unknown>;

function asObject(body: unknown): Body {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new ProblemError('bad-request', 'the body must be a JSON object');
  }
  return body as Body;
}

function onlyFields(body: Body, allowed: readonly string[]): void {
  for (const k of Object.keys(body)) {
    if (!allowed.includes(k)) {
      throw new ProblemError('bad-request', `unknown field "${k}"; allowed: ${allowed.join(', ')}`, {
        field: k,
      });
    }
  }
}

function str(body: Body, field: string, opts: { required: boolean; max: number }): string | undefined {
  const v = body[field];
  if (v === undefined) {
    if (opts.required) throw new ProblemError('bad-request', `"${field}" is required`, { field });
    return undefined;
  }
  if (typeof v !== 'string') throw new ProblemError('bad-request', `"${field}" must be a string`, { field });
  if (v.length === 0 || Buffer.byteLength(v) > opts.max) {
    throw new ProblemError('bad-request', `"${field}" must be 1–${opts.max} bytes`, { field });
  }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(v)) {
    throw new ProblemError('bad-request', `"${field}" must not contain control characters`, { field });
  }
  return v;
}

function int(body: Body, field: string, opts: { required: boolean; fallback?: number }): number {
  const v = body[field];
  if (v === undefined) {
    if (opts.required || opts.fallback === undefined) {
      throw new ProblemError('bad-request', `"${field}" is required`, { field });
    }
    return opts.fallback;
  }
  if (typeof v !== 'number' || !Number.isSafeInteger(v)) {
    throw new ProblemError('bad-request', `"${field}" must be an integer number of milliseconds`, { field });
  }
  return v;
}

function ttl(body: Body, limits: IssuerLimits, required: boolean, fallback: number): number {
  const v = int(body, 'ttlMs', { required, fallback });
  if (v < limits.minTtlMs || v > limits.maxTtlMs) {
    throw new ProblemError('invalid-ttl', `ttlMs must be between ${limits.minTtlMs} and ${limits.maxTtlMs}`, {
      field: 'ttlMs',
      min: limits.minTtlMs,
      max: limits.maxTtlMs,
    });
  }
  return v;
}

export function validKey(key: string): string {
  const c = checkLockKey(key);
  if (!c.ok) throw new ProblemError('invalid-key', c.reason);
  return key;
}

export interface AcquireBody {
  owner: string;
  ttlMs: number;
  waitMs: number;
  requestId?: string;
}

export function parseAcquire(raw: unknown, limits: IssuerLimits, defaultTtlMs: number): AcquireBody {
  const body = asObject(raw);
  onlyFields(body, ['owner', 'ttlMs', 'waitMs', 'requestId']);
  const owner = str(body, 'owner', { required: true, max: 256 }) as string;
  const ttlMs = ttl(body, limits, false, defaultTtlMs);
  const waitMs = int(body, 'waitMs', { required: false, fallback: 0 });
  if (waitMs < 0 || waitMs > limits.maxWaitMs) {
    throw new ProblemError('bad-request', `"waitMs" must be between 0 and ${limits.maxWaitMs}`, {
      field: 'waitMs',
    });
  }
  const requestId = str(body, 'requestId', { required: false, max: 128 });
  return requestId === undefined ? { owner, ttlMs, waitMs } : { owner, ttlMs, waitMs, requestId };
}

export interface AcquireManyBody extends AcquireBody {
  keys: string[];
}

/** `{keys, owner, ttlMs, waitMs, requestId}`: 1 … maxKeys valid keys, no two equal. */
export function parseAcquireMany(
  raw: unknown,
  limits: IssuerLimits,
  defaultTtlMs: number,
  maxKeys = MAX_KEYS_PER_ACQUIRE,
): AcquireManyBody {
  const body = asObject(raw);
  const keys = body['keys'];
  if (!Array.isArray(keys) || keys.length === 0 || keys.length > maxKeys) {
    throw new ProblemError('bad-request', `"keys" must be an array of 1–${maxKeys} lock keys`, {
      field: 'keys',
    });
  }
  const seen = new Set<string>();
  for (const [i, k] of keys.entries()) {
    if (typeof k !== 'string') {
      throw new ProblemError('bad-request', `"keys[${i}]" must be a string`, { field: `keys[${i}]` });
    }
    const c = checkLockKey(k);
    if (!c.ok) throw new ProblemError('invalid-key', `keys[${i}]: ${c.reason}`, { field: `keys[${i}]` });
    if (seen.has(k)) {
      throw new ProblemError('bad-request', `"keys[${i}]" repeats "${k}": each key once`, {
        field: `keys[${i}]`,
      });
    }
    seen.add(k);
  }
  const { keys: _keys, ...rest } = body;
  void _keys;
  return { keys: keys as string[], ...parseAcquire(rest, limits, defaultTtlMs) };
}

export function parseRenew(raw: unknown, limits: IssuerLimits, defaultTtlMs: number) {
  const body = asObject(raw);
  onlyFields(body, ['leaseId', 'ttlMs']);
  const leaseId = str(body, 'leaseId', { required: true, max: 128 }) as string;
  return { leaseId, ttlMs: ttl(body, limits, false, defaultTtlMs) };
}

export function parseRelease(raw: unknown) {
  const body = asObject(raw);
  onlyFields(body, ['leaseId']);
  return { leaseId: str(body, 'leaseId', { required: true, max: 128 }) as string };
}
