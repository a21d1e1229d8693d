/**
 * `kind: s3`: S3-compatible object storage, path style (`/bucket/key`), behind the
 * gateway with the client's SigV4 signature intact. Reads pass through; every write of
 * an object (PutObject, CopyObject's destination, the multipart steps, DeleteObject,
 * tagging/ACL changes) is fenced by the route's lock rendered from the path, so a final
 * `*key` capture gives one lock per object (`/invoices/*key` → `invoice:{key}`). See
 * classify.ts and locks.ts for the rules, docs/s3.md for the contract.
 *
 * Forwarding reuses the shared HTTP forwarder (pool, circuit breaker, forward guard,
 * in-flight entries) with `asSent`: method, path and query byte for byte and the Host
 * header as the client sent it, so the storage verifies the signature the client made.
 * The gateway holds no S3 credentials.
 *
 * DeleteObjects (`POST /bucket?delete`) names its keys in the body: the kind asks the
 * gateway for the body (`needs-body`, at most 1 MiB), every key's lock is the one its
 * PutObject would be fenced by, and all of them are admitted (or the request refused)
 * before the same bytes are forwarded.
 *
 * Refusals on s3 routes are S3 XML `<Error>` documents (errors.ts); a Host that may name
 * a bucket virtual-hosted style is refused unless the upstream declares its domains, and
 * then the bucket is read from it (hosts.ts).
 */
import { forwardHttp } from '../../forward.js';
import { headerLookup } from '../../headers.js';
import { compileHttpUpstream } from '../http/compile.js';
import type { DownstreamKind, UpstreamCompileResult, WriteSet } from '../types.js';
import { s3ProblemFormat } from './errors.js';
import { compileHostDomains, s3HostAddressing, type S3HostSettings } from './hosts.js';
import { s3Writes } from './locks.js';

function compileS3Upstream(
  name: string,
  raw: Parameters<typeof compileHttpUpstream>[1],
): UpstreamCompileResult {
  const compiled = compileHttpUpstream(name, raw);
  if (!compiled.ok) return compiled;
  if (compiled.upstream.basePath !== '') {
    return {
      ok: false,
      errors: [
        {
          field: ['url'],
          message:
            'an s3 upstream takes no path: requests are forwarded path-style exactly as signed (/bucket/key)',
        },
      ],
    };
  }
  // Shaped by upstreamFields.virtualHostDomains (the policy schema checked it).
  const domains = compileHostDomains(raw.virtualHostDomains as string[] | undefined);
  if (!domains.ok) return domains;
  const s3: S3HostSettings = {
    virtualHostDomains: domains.domains,
    ownHost: new URL(compiled.upstream.origin).hostname,
  };
  return { ok: true, upstream: { ...compiled.upstream, settings: { s3 } } };
}

export const s3Kind: DownstreamKind = {
  name: 's3',
  fenceAt: 'gateway',
  upstreamFields: {
    /**
     * The domains its storage serves virtual-hosted-style buckets under (`Host:
     * bucket.domain`); [] when it serves none. Absent: a Host that may name a bucket is
     * refused (./hosts.ts).
     */
    virtualHostDomains: { type: 'array', items: { type: 'string', minLength: 1 }, uniqueItems: true },
  },
  routeFields: {},
  problemFormat: s3ProblemFormat,
  hostAddressing: s3HostAddressing,
  compileUpstream: compileS3Upstream,
  compileRoute: (raw) =>
    raw.fencing?.check === 'sequencer'
      ? {
          ok: false,
          errors: [
            {
              field: ['fencing', 'check'],
              message:
                'an s3 route cannot use "sequencer": the request reaches the storage exactly as signed, and a ' +
                'Fencing-Sequencer header the client signed could be neither removed nor kept secret from it; use token or lease',
            },
          ],
        }
      : { ok: true, target: {} },
  writes(route, req): WriteSet {
    const set = s3Writes(route, { ...req, header: headerLookup(req.rawHeaders) });
    switch (set.kind) {
      case 'read':
        return { kind: 'read' };
      case 'write':
        return { kind: 'write', locks: set.locks };
      case 'refuse':
        return set;
      case 'needs-body':
        return {
          kind: 'needs-body',
          maxBytes: set.maxBytes,
          locks: (body): WriteSet => {
            const keyed = set.locks(body);
            return keyed.kind === 'write' ? { kind: 'write', locks: keyed.locks } : keyed;
          },
        };
    }
  },
  open(env) {
    return {
      serve: (ex, state) => forwardHttp(ex, state, env, { asSent: true }),
      // The shared pool follows the policy itself (../../gateway-server.ts); this only shows its breakers.
      retain: (policy) => env.pool.seed(policy, 's3'),
      close: async () => undefined,
    };
  },
};
