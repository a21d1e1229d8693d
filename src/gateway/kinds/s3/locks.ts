/**
 * The locks an S3 request writes under, on its route:
 *
 * - a route without a lock passes everything through (the policy declared it unfenced);
 * - reads need no lock;
 * - a write of what its path names is fenced by the route's lock rendered from the path,
 *   except that a lock built from an empty final capture (`/invoices/*key` on
 *   `/invoices`: a bucket-level write such as CreateBucket, DeleteBucket, a bucket policy
 *   or a browser form upload whose key is in the body) is refused with 400
 *   `bucket-write`: that lock would fence no object. A route without a lock may
 *   declare such writes (an earlier, unfenced route for `/invoices`);
 * - DeleteObjects needs its body: each key is placed where PutObject of that key would
 *   put it (`/bucket/<key>`), matched against the route's own pattern and rendered with
 *   the route's template, so the key's lock is the one its PutObject is fenced by. Every
 *   key must render, or the whole request is refused.
 */
import { ProblemError } from '../../../errors.js';
import { rawHeaderValues } from '../../headers.js';
import { matchPath, renderLock, type CompiledRoute, type HeaderLookup } from '../../../policy/index.js';
import { classifyS3, type S3Operation, type S3Request } from './classify.js';
import { DELETE_OBJECTS_MAX_BYTES, DELETE_OBJECTS_MAX_KEYS, parseDeleteObjects } from './delete-objects.js';

/** A request's locks, rendered; or the body is needed first; or it is refused. */
export type S3WriteSet =
  | { kind: 'read'; operation: string }
  | { kind: 'write'; operation: string; locks: readonly string[] }
  | {
      kind: 'needs-body';
      operation: 'DeleteObjects';
      /** Read at most this many bytes (refuse with 413 past it), then call `locks`. */
      maxBytes: number;
      /** The locks of every key the body names (deduplicated, sorted), or a refusal. */
      locks(body: Uint8Array): S3BodyWriteSet;
    }
  | { kind: 'refuse'; problem: ProblemError };

export type S3BodyWriteSet =
  | { kind: 'write'; operation: string; locks: readonly string[]; keys: number }
  | { kind: 'refuse'; problem: ProblemError };

export interface S3WritesInput extends S3Request {
  params: Readonly<Record<string, string>>;
  header: HeaderLookup;
}

export function s3Writes(route: CompiledRoute, req: S3WritesInput): S3WriteSet {
  const template = route.lock;
  if (template === null) return { kind: 'read', operation: 'unfenced route' };
  const op: S3Operation = classifyS3(req);
  switch (op.kind) {
    case 'refuse':
      return op;
    case 'read':
      return { kind: 'read', operation: op.name };
    case 'write': {
      const rest = route.path.rest ?? null;
      const usesRest = rest !== null && template.parts.some((p) => p.kind === 'param' && p.name === rest);
      if (usesRest && (req.params[rest] ?? '') === '') {
        return refuse(
          'bucket-write',
          `${op.name}: route "${route.name}" fences objects by "{${rest}}", which is empty here ` +
            '(a write to the bucket itself); declare such writes on a route without a lock',
        );
      }
      const rendered = renderLock(template, req.params, req.header);
      if (!rendered.ok) return refuse('invalid-key', `cannot derive the lock: ${rendered.reason}`);
      return { kind: 'write', operation: op.name, locks: [rendered.key] };
    }
    case 'delete-objects': {
      const framing = unsupportedFraming(req.rawHeaders);
      if (framing !== null) return refuse('request-unfenceable', `DeleteObjects: ${framing}`);
      const length = contentLength(req.rawHeaders);
      if (length !== null && length > DELETE_OBJECTS_MAX_BYTES) {
        return refuse(
          'payload-too-large',
          `DeleteObjects bodies are limited to ${DELETE_OBJECTS_MAX_BYTES} bytes`,
        );
      }
      return {
        kind: 'needs-body',
        operation: 'DeleteObjects',
        maxBytes: DELETE_OBJECTS_MAX_BYTES,
        locks: (body) => deleteObjectsLocks(route, op.segments, req.header, body),
      };
    }
  }
}

function refuse(
  code: 'bucket-write' | 'request-unfenceable' | 'invalid-key' | 'payload-too-large',
  detail: string,
) {
  return { kind: 'refuse' as const, problem: new ProblemError(code, detail) };
}

/** The body's framing when the gateway cannot read the XML from it as sent; else null. */
function unsupportedFraming(rawHeaders: readonly string[]): string | null {
  for (const value of rawHeaderValues(rawHeaders, 'content-encoding')) {
    const codings = value.split(',').map((c) => c.trim().toLowerCase());
    if (codings.some((c) => c !== '' && c !== 'identity'))
      return `Content-Encoding "${value}" is not accepted`;
  }
  for (const value of rawHeaderValues(rawHeaders, 'x-amz-content-sha256')) {
    if (value.toUpperCase().startsWith('STREAMING-')) return `a streaming payload (${value}) is not accepted`;
  }
  return null;
}

function contentLength(rawHeaders: readonly string[]): number | null {
  const values = rawHeaderValues(rawHeaders, 'content-length');
  if (values.length !== 1 || !/^\d{1,15}$/.test(values[0] ?? '')) return null;
  return Number(values[0]);
}

/** Segments of an object key as its PutObject path would be split, or why it cannot be. */
function keySegments(key: string): string[] | string {
  const segments: string[] = [];
  for (const segment of key.split('/')) {
    if (segment === '') continue;
    if (segment === '.' || segment === '..') return 'has a "." or ".." segment';
    if (/[\\\0]/.test(segment)) return 'contains "\\" or NUL';
    segments.push(segment);
  }
  return segments;
}

export function deleteObjectsLocks(
  route: CompiledRoute,
  bucketSegments: readonly string[],
  header: HeaderLookup,
  body: Uint8Array,
): S3BodyWriteSet {
  const template = route.lock;
  if (template === null) return { kind: 'write', operation: 'DeleteObjects', locks: [], keys: 0 };
  const parsed = parseDeleteObjects(body, {
    maxBytes: DELETE_OBJECTS_MAX_BYTES,
    maxKeys: DELETE_OBJECTS_MAX_KEYS,
  });
  if (!parsed.ok) {
    return parsed.tooLarge === true
      ? refuse('payload-too-large', `DeleteObjects: ${parsed.reason}`)
      : {
          kind: 'refuse',
          problem: new ProblemError('delete-objects-invalid', `DeleteObjects: ${parsed.reason}`),
        };
  }
  const locks = new Set<string>();
  for (const key of parsed.keys) {
    const bad = (why: string) => ({
      kind: 'refuse' as const,
      problem: new ProblemError('delete-objects-invalid', `DeleteObjects: key ${JSON.stringify(key)} ${why}`),
    });
    const segments = keySegments(key);
    if (typeof segments === 'string')
      return bad(`${segments}; such objects cannot be written through the gateway either`);
    const params = matchPath(route.path, [...bucketSegments, ...segments]);
    if (params === null) return bad(`is not under route "${route.name}" (${route.path.source})`);
    const rest = route.path.rest ?? null;
    if (rest !== null && params[rest] === '') return bad('names no object');
    const rendered = renderLock(template, params, header);
    if (!rendered.ok) return bad(`gives no valid lock: ${rendered.reason}`);
    locks.add(rendered.key);
  }
  return { kind: 'write', operation: 'DeleteObjects', locks: [...locks].sort(), keys: parsed.keys.length };
}
