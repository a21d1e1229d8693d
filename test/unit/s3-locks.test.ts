import { describe, expect, it } from 'vitest';
import { s3Writes, type S3WriteSet } from '../../src/gateway/kinds/s3/locks.js';
import {
  matchPath,
  parseLockTemplate,
  parsePathPattern,
  splitRequestPath,
  type CompiledRoute,
  type HeaderLookup,
} from '../../src/policy/index.js';

function route(path: string, lock: string | null): CompiledRoute {
  const p = parsePathPattern(path);
  if (!p.ok) throw new Error(p.reason);
  const t = lock === null ? null : parseLockTemplate(lock);
  if (t !== null && !t.ok) throw new Error(t.reason);
  return {
    name: 'objects',
    file: 'p.yaml',
    line: 1,
    methods: ['GET', 'HEAD', 'PUT', 'POST', 'DELETE'],
    path: p.pattern,
    upstream: {} as CompiledRoute['upstream'],
    lock: t === null ? null : t.template,
    fencing: t === null ? null : { check: 'token', enforce: true, drainTimeoutMs: 5000 },
    upload: { idleTimeoutMs: 60000, timeoutMs: 900000 },
    idempotency: null,
    shadows: [],
    target: {},
  };
}

const noHeaders: HeaderLookup = (name) => ({ ok: false, reason: `header "${name}" is missing` });

function writes(
  r: CompiledRoute,
  method: string,
  target: string,
  headers: Record<string, string> = {},
): S3WriteSet {
  const q = target.indexOf('?');
  const path = q < 0 ? target : target.slice(0, q);
  const split = splitRequestPath(path);
  const params = (split.ok ? matchPath(r.path, split.segments) : null) ?? {};
  const rawHeaders = Object.entries(headers).flat();
  const header: HeaderLookup = (name) => {
    const v = headers[name];
    return v === undefined ? noHeaders(name) : { ok: true, value: v };
  };
  return s3Writes(r, { method, path, query: q < 0 ? '' : target.slice(q + 1), rawHeaders, params, header });
}

const body = (keys: string[]) =>
  new TextEncoder().encode(
    `<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/">${keys
      .map((k) => `<Object><Key>${k}</Key></Object>`)
      .join('')}</Delete>`,
  );

function bodyLocks(set: S3WriteSet, keys: string[]) {
  if (set.kind !== 'needs-body') throw new Error(`expected needs-body, got ${set.kind}`);
  return set.locks(body(keys));
}

describe('S3 locks on a route', () => {
  const invoices = route('/invoices/*key', 'invoice:{key}');

  it('reads need no lock', () => {
    expect(writes(invoices, 'GET', '/invoices/a.pdf')).toEqual({ kind: 'read', operation: 'GetObject' });
    expect(writes(invoices, 'GET', '/invoices?list-type=2')).toMatchObject({ kind: 'read' });
  });

  it.each([
    ['PUT', '/invoices/2024/a%20b.pdf', {}, 'invoice:2024/a b.pdf'],
    ['PUT', '/invoices/a.pdf', { 'x-amz-copy-source': '/other/src' }, 'invoice:a.pdf'],
    ['POST', '/invoices/a.pdf?uploads', {}, 'invoice:a.pdf'],
    ['PUT', '/invoices/a.pdf?partNumber=2&uploadId=u', {}, 'invoice:a.pdf'],
    ['POST', '/invoices/a.pdf?uploadId=u', {}, 'invoice:a.pdf'],
    ['DELETE', '/invoices/a.pdf?uploadId=u', {}, 'invoice:a.pdf'],
    ['DELETE', '/invoices/a.pdf', {}, 'invoice:a.pdf'],
  ])('%s %s is fenced by its object lock', (method, target, headers, lock) => {
    expect(writes(invoices, method, target, headers)).toMatchObject({ kind: 'write', locks: [lock] });
  });

  it.each([
    ['PUT', '/invoices'],
    ['DELETE', '/invoices/'],
    ['POST', '/invoices'],
    ['PUT', '/invoices?policy'],
  ])('%s %s (the bucket itself) is refused: its lock would have an empty key', (method, target) => {
    expect(writes(invoices, method, target)).toMatchObject({
      kind: 'refuse',
      problem: { code: 'bucket-write', status: 400 },
    });
  });

  it('a route whose lock does not use the capture fences bucket writes under it', () => {
    const r = route('/:bucket/*', 'bucket:{bucket}');
    expect(writes(r, 'PUT', '/photos')).toMatchObject({ kind: 'write', locks: ['bucket:photos'] });
    expect(writes(r, 'PUT', '/photos/x/y')).toMatchObject({ kind: 'write', locks: ['bucket:photos'] });
  });

  it('a route without a lock passes everything', () => {
    const r = route('/invoices', null);
    expect(writes(r, 'PUT', '/invoices')).toMatchObject({ kind: 'read' });
    expect(writes(r, 'POST', '/invoices?delete')).toMatchObject({ kind: 'read' });
  });

  it('a lock from a header', () => {
    const r = route('/:bucket/*key', 'tenant:{header.x-tenant}:{bucket}/{key}');
    expect(writes(r, 'PUT', '/b/k', { 'x-tenant': 'acme' })).toMatchObject({ locks: ['tenant:acme:b/k'] });
    expect(writes(r, 'PUT', '/b/k')).toMatchObject({ kind: 'refuse', problem: { code: 'invalid-key' } });
  });

  describe('DeleteObjects', () => {
    it('locks every key as its PutObject would be locked, deduplicated and sorted', () => {
      const set = writes(invoices, 'POST', '/invoices?delete');
      expect(set).toMatchObject({ kind: 'needs-body', maxBytes: 1024 * 1024 });
      expect(bodyLocks(set, ['b.pdf', '2024/a b.pdf', 'b.pdf', 'x//y/'])).toEqual({
        kind: 'write',
        operation: 'DeleteObjects',
        locks: ['invoice:2024/a b.pdf', 'invoice:b.pdf', 'invoice:x/y'],
        keys: 4,
      });
      // the same lock PutObject of that key gets
      expect(writes(invoices, 'PUT', '/invoices/x//y/')).toMatchObject({ locks: ['invoice:x/y'] });
    });

    it('works with a bucket parameter in the pattern', () => {
      const r = route('/:bucket/*key', 'obj:{bucket}/{key}');
      expect(bodyLocks(writes(r, 'POST', '/photos?delete'), ['a', 'b/c'])).toMatchObject({
        locks: ['obj:photos/a', 'obj:photos/b/c'],
      });
    });

    it.each([
      ['a dot segment', ['ok', 'a/../b']],
      ['a backslash', ['a\\b']],
      ['only slashes', ['//']],
      ['an invalid lock key (control character)', ['a&#1;b']],
    ])('refuses the whole request for one key with %s', (_what, keys) => {
      expect(bodyLocks(writes(invoices, 'POST', '/invoices?delete'), keys)).toMatchObject({
        kind: 'refuse',
        problem: { code: 'delete-objects-invalid', status: 400 },
      });
    });

    it('refuses malformed bodies and declared oversize bodies', () => {
      const set = writes(invoices, 'POST', '/invoices?delete');
      if (set.kind !== 'needs-body') throw new Error('expected needs-body');
      expect(set.locks(new TextEncoder().encode('<Delete/>'))).toMatchObject({
        kind: 'refuse',
        problem: { code: 'delete-objects-invalid' },
      });
      expect(
        writes(invoices, 'POST', '/invoices?delete', { 'content-length': String(1024 * 1024 + 1) }),
      ).toMatchObject({
        kind: 'refuse',
        problem: { code: 'payload-too-large', status: 413 },
      });
    });

    it.each([
      [{ 'content-encoding': 'aws-chunked' }],
      [{ 'content-encoding': 'gzip' }],
      [{ 'x-amz-content-sha256': 'STREAMING-AWS4-HMAC-SHA256-PAYLOAD' }],
    ])('refuses a body it cannot read as sent: %o', (headers) => {
      expect(writes(invoices, 'POST', '/invoices?delete', headers)).toMatchObject({
        kind: 'refuse',
        problem: { code: 'request-unfenceable' },
      });
    });
  });
});
