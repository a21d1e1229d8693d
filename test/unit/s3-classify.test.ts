import { describe, expect, it } from 'vitest';
import { classifyS3, queryNames } from '../../src/gateway/kinds/s3/classify.js';

function op(method: string, target: string, headers: Record<string, string> = {}) {
  const q = target.indexOf('?');
  return classifyS3({
    method,
    path: q < 0 ? target : target.slice(0, q),
    query: q < 0 ? '' : target.slice(q + 1),
    rawHeaders: Object.entries(headers).flat(),
  });
}

describe('S3 operation classifier', () => {
  it.each([
    ['GET', '/', 'ListBuckets', 'service'],
    ['GET', '/invoices?list-type=2&prefix=2024%2F', 'GET bucket', 'bucket'],
    ['HEAD', '/invoices', 'HEAD bucket', 'bucket'],
    ['GET', '/invoices?uploads', 'ListMultipartUploads', 'bucket'],
    ['GET', '/invoices/a.pdf', 'GetObject', 'object'],
    ['HEAD', '/invoices/a.pdf', 'HeadObject', 'object'],
    ['GET', '/invoices/a.pdf?uploadId=u1', 'ListParts', 'object'],
    ['GET', '/invoices/a.pdf?tagging', 'GetObject', 'object'],
    ['OPTIONS', '/invoices/a.pdf', 'CORS preflight', 'object'],
  ])('%s %s is a read (%s)', (method, target, name, scope) => {
    expect(op(method, target)).toEqual({ kind: 'read', name, scope });
  });

  it.each([
    ['PUT', '/invoices/a.pdf?x-id=PutObject', {}, 'PutObject'],
    ['PUT', '/invoices/a.pdf', { 'x-amz-copy-source': '/invoices/b.pdf' }, 'CopyObject'],
    ['PUT', '/invoices/a.pdf?partNumber=1&uploadId=u1', {}, 'UploadPart'],
    ['PUT', '/invoices/a.pdf?partNumber=1&uploadId=u1', { 'X-Amz-Copy-Source': 'x/y' }, 'UploadPartCopy'],
    ['PUT', '/invoices/a.pdf?tagging', {}, 'PutObject ?tagging'],
    ['PUT', '/invoices/a.pdf?acl', {}, 'PutObject ?acl'],
    ['POST', '/invoices/a.pdf?uploads', {}, 'CreateMultipartUpload'],
    ['POST', '/invoices/a.pdf?uploads=', {}, 'CreateMultipartUpload'],
    ['POST', '/invoices/a.pdf?uploadId=u1', {}, 'CompleteMultipartUpload'],
    ['POST', '/invoices/a.pdf?restore', {}, 'POST object'],
    ['POST', '/invoices/a.pdf?select&select-type=2', {}, 'POST object'],
    ['DELETE', '/invoices/a.pdf', {}, 'DeleteObject'],
    ['DELETE', '/invoices/a.pdf?uploadId=u1', {}, 'AbortMultipartUpload'],
    ['DELETE', '/invoices/a.pdf?tagging', {}, 'DeleteObjectTagging'],
    ['PATCH', '/invoices/a.pdf', {}, 'PATCH object'],
    ['PUT', '/invoices/2024/03/a%20b.pdf', {}, 'PutObject'],
  ])('%s %s is an object write (%s)', (method, target, headers, name) => {
    expect(op(method, target, headers)).toEqual({ kind: 'write', name, scope: 'object' });
  });

  it.each([
    ['PUT', '/invoices'],
    ['DELETE', '/invoices'],
    ['PUT', '/invoices?policy'],
    ['POST', '/invoices'], // a browser form upload: its key is in the body
    ['POST', '/invoices?Delete'], // not the DeleteObjects subresource: a bucket write
    ['PUT', '/'],
  ])('%s %s writes the bucket (or the service) itself', (method, target) => {
    expect(op(method, target)).toMatchObject({ kind: 'write' });
    expect(op(method, target)).not.toMatchObject({ scope: 'object' });
  });

  it.each([
    '/invoices?delete',
    '/invoices?delete=',
    '/invoices/?delete&x-id=DeleteObjects',
    '//invoices?delete',
  ])('POST %s is DeleteObjects', (target) => {
    expect(op('POST', target)).toMatchObject({
      kind: 'delete-objects',
      bucket: 'invoices',
      segments: ['invoices'],
    });
  });

  it.each(['/invoices/a.pdf?delete', '/?delete'])(
    'POST %s (DeleteObjects not on a bucket) is refused',
    (target) => {
      expect(op('POST', target)).toMatchObject({
        kind: 'refuse',
        problem: { code: 'request-unfenceable', status: 400 },
      });
    },
  );

  it.each([
    ['/invoices/%2e%2e/x', ''],
    ['/invoices/a%2Fb', ''],
    ['/invoices/a', '%zz'],
  ])('refuses the ambiguous %s ? %s', (path, query) => {
    expect(classifyS3({ method: 'PUT', path, query, rawHeaders: [] })).toMatchObject({
      kind: 'refuse',
      problem: { code: 'bad-request' },
    });
  });

  it('every method but GET, HEAD and OPTIONS on an object is a write', () => {
    for (const method of ['PUT', 'POST', 'DELETE', 'PATCH', 'PROPFIND', 'put']) {
      expect(op(method, '/b/k')).toMatchObject({ kind: 'write', scope: 'object' });
    }
  });

  it('reads query parameter names, decoded', () => {
    expect([...(queryNames('a=1&b&%75ploads=&&c=x=y') ?? [])]).toEqual(['a', 'b', 'uploads', 'c']);
    expect(queryNames('%zz')).toBeNull();
  });
});
