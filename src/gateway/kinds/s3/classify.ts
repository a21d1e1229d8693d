/**
 * Which S3 operation a path-style request is, from its method, raw path, raw query and
 * headers alone (the body unread): a read, a write of the object (or bucket) its path
 * names, a DeleteObjects whose keys are in the body, or a request refused as ambiguous.
 *
 * The rule errs towards "write": every method but GET, HEAD and OPTIONS is a write of
 * what the path names (PutObject, CopyObject's destination, the multipart steps,
 * DeleteObject, tagging and ACL changes, anything S3 may add), so nothing that changes
 * an object passes as a read. Names are for logs and problem details only; the decision
 * depends on method, scope and the `delete` / `uploads` / `uploadId` subresources.
 */
import { ProblemError } from '../../../errors.js';
import { rawHeaderValues } from '../../headers.js';
import { splitRequestPath } from '../../../policy/index.js';

export interface S3Request {
  method: string;
  /** Raw path as received, without the query. */
  path: string;
  /** Raw query string as received, without '?' ('' when none). */
  query: string;
  rawHeaders: readonly string[];
}

/** What a path-style path names: the service root, a bucket, or an object in a bucket. */
export type S3Scope = 'service' | 'bucket' | 'object';

export type S3Operation =
  | { kind: 'read'; name: string; scope: S3Scope }
  /** A write of what the request's own path names (its route's lock covers it). */
  | { kind: 'write'; name: string; scope: S3Scope }
  /** DeleteObjects: the keys are in the XML body, which must be read before admission. */
  | { kind: 'delete-objects'; bucket: string; segments: readonly string[] }
  | { kind: 'refuse'; problem: ProblemError };

const READ_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Names of the query's parameters, percent-decoded; null when the query is malformed. */
export function queryNames(query: string): Set<string> | null {
  const names = new Set<string>();
  if (query === '') return names;
  for (const part of query.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const raw = eq < 0 ? part : part.slice(0, eq);
    try {
      names.add(decodeURIComponent(raw.replace(/\+/g, ' ')));
    } catch {
      return null;
    }
  }
  return names;
}

function refuse(code: 'request-unfenceable' | 'bad-request', detail: string): S3Operation {
  return { kind: 'refuse', problem: new ProblemError(code, detail) };
}

export function classifyS3(req: S3Request): S3Operation {
  const split = splitRequestPath(req.path);
  if (!split.ok) return refuse('bad-request', split.reason);
  const { segments } = split;
  const names = queryNames(req.query);
  if (names === null) return refuse('bad-request', 'the query string has invalid percent-encoding');
  const method = req.method.toUpperCase();
  const scope: S3Scope = segments.length === 0 ? 'service' : segments.length === 1 ? 'bucket' : 'object';

  if (READ_METHODS.has(method)) return { kind: 'read', name: readName(method, scope, names), scope };

  if (method === 'POST' && names.has('delete')) {
    if (scope !== 'bucket') {
      return refuse(
        'request-unfenceable',
        'POST ?delete (DeleteObjects) is addressed to a bucket (/bucket?delete), not to an object or the root',
      );
    }
    return { kind: 'delete-objects', bucket: segments[0] ?? '', segments };
  }
  if (scope !== 'object') return { kind: 'write', name: `${method} ${scope}`, scope };
  return { kind: 'write', name: objectWriteName(method, names, req.rawHeaders), scope };
}

function readName(method: string, scope: S3Scope, names: Set<string>): string {
  if (method === 'OPTIONS') return 'CORS preflight';
  if (scope === 'service') return 'ListBuckets';
  if (scope === 'bucket') return names.has('uploads') ? 'ListMultipartUploads' : `${method} bucket`;
  if (names.has('uploadId')) return 'ListParts';
  return method === 'HEAD' ? 'HeadObject' : 'GetObject';
}

function objectWriteName(method: string, names: Set<string>, rawHeaders: readonly string[]): string {
  const copy = rawHeaderValues(rawHeaders, 'x-amz-copy-source').length > 0;
  switch (method) {
    case 'PUT':
      if (names.has('uploadId') && names.has('partNumber')) return copy ? 'UploadPartCopy' : 'UploadPart';
      for (const sub of ['acl', 'tagging', 'retention', 'legal-hold']) {
        if (names.has(sub)) return `PutObject ?${sub}`;
      }
      return copy ? 'CopyObject' : 'PutObject';
    case 'POST':
      if (names.has('uploads')) return 'CreateMultipartUpload';
      if (names.has('uploadId')) return 'CompleteMultipartUpload';
      return 'POST object';
    case 'DELETE':
      if (names.has('uploadId')) return 'AbortMultipartUpload';
      if (names.has('tagging')) return 'DeleteObjectTagging';
      return 'DeleteObject';
    default:
      return `${method} object`;
  }
}
