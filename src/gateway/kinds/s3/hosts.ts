/**
 * Which bucket a request's Host names. S3 has two addressing styles: path style
 * (`Host: storage`, `PUT /bucket/key`) and virtual-hosted style (`Host: bucket.domain`,
 * `PUT /key`). The gateway routes and renders locks from the path, and forwards the Host
 * as sent (it is signed), so a storage that serves virtual hosts would write another
 * object than the one the path's lock fences: `PUT /other/k` with `Host: invoices.s3.test`
 * is `invoices/other/k` there. So on an s3 route a Host is:
 *
 * - path style when it cannot name a bucket: absent or empty, an IP literal, a name
 *   without a dot (`localhost`, `minio`), the upstream's own host name, or a domain the
 *   upstream declares (`virtualHostDomains`); or when the upstream declares that its
 *   storage serves no virtual hosts (`virtualHostDomains: []`);
 * - virtual-hosted when it is `<bucket>.<domain>` for a domain the upstream declares: the
 *   bucket is put before the path for routing and lock rendering;
 * - refused (400 virtual-host-refused) otherwise: any other dotted name may be a bucket
 *   under a domain the gateway was not told of; and, failing closed where storages may
 *   differ, a dotted name with upper-case letters, a bucket that is not a bucket name, or
 *   a Host that is not a host name.
 *
 * Ports are ignored: a storage reads the bucket from the name.
 */
import { isIP } from 'node:net';
import { ProblemError } from '../../../errors.js';
import type { CompiledPolicy, CompiledRoute, CompiledUpstream } from '../../../policy/index.js';
import type { FieldError, HostAddressing, HostPrefix } from '../types.js';

/** What an s3 upstream's settings say about Hosts, compiled from the policy. */
export interface S3HostSettings {
  /** The domains its storage serves virtual-hosted buckets under, longest first; null: not declared. */
  readonly virtualHostDomains: readonly string[] | null;
  /** The host name of its URL (lower case; an IPv6 literal in brackets). */
  readonly ownHost: string;
}

export type HostStyle =
  { style: 'path' } | { style: 'virtual'; bucket: string } | { style: 'refused'; reason: string };

const PATH: HostStyle = Object.freeze({ style: 'path' });
const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const BUCKET = /^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/;
const HOST = /^([A-Za-z0-9._-]*)(?::[0-9]{1,5})?$/;
const IPV6_HOST = /^\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?$/;

/** Why `domain` cannot be declared, or null. */
export function domainProblem(domain: string): string | null {
  if (domain.length > 253) return 'is longer than 253 characters';
  if (isIP(domain) !== 0) return 'is an IP address, which cannot carry a bucket name';
  if (!domain.split('.').every((label) => LABEL.test(label)))
    return 'must be a DNS name in lower case (letters, digits and "-" in dot-separated labels), without a port';
  return null;
}

/** The `virtualHostDomains` of an s3 upstream, checked, longest first; or the errors. */
export function compileHostDomains(
  raw: readonly string[] | undefined,
): { ok: true; domains: readonly string[] | null } | { ok: false; errors: FieldError[] } {
  if (raw === undefined) return { ok: true, domains: null };
  const errors: FieldError[] = [];
  raw.forEach((domain, i) => {
    const problem = domainProblem(domain);
    const outer = raw.find((other) => other !== domain && domain.endsWith(`.${other}`));
    if (problem !== null) errors.push({ field: ['virtualHostDomains', i], message: problem });
    else if (outer !== undefined)
      errors.push({
        field: ['virtualHostDomains', i],
        message: `is under "${outer}", also listed: a Host under both would name two different buckets`,
      });
  });
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, domains: [...raw].sort((a, b) => b.length - a.length) };
}

/** How an upstream with `settings` reads the Host header value `host`. */
export function hostStyle(host: string | undefined, settings: S3HostSettings): HostStyle {
  if (host === undefined || host === '') return PATH;
  if (IPV6_HOST.test(host)) return PATH;
  const m = HOST.exec(host);
  const name = m?.[1];
  if (name === undefined)
    return { style: 'refused', reason: `Host ${JSON.stringify(host)} is not a host name` };
  if (name === '' || !name.includes('.') || isIP(name) !== 0) return PATH;
  const domains = settings.virtualHostDomains;
  if (domains !== null && domains.length === 0) return PATH;
  if (name !== name.toLowerCase()) {
    return {
      style: 'refused',
      reason:
        `Host "${host}" has upper-case letters, and storages differ in whether they read a bucket ` +
        'from it regardless of case: write the host name in lower case',
    };
  }
  if (name === settings.ownHost) return PATH;
  for (const domain of domains ?? []) {
    if (name === domain) return PATH;
    if (!name.endsWith(domain) || name[name.length - domain.length - 1] !== '.') continue;
    const bucket = name.slice(0, name.length - domain.length - 1);
    if (!BUCKET.test(bucket) || bucket.includes('..') || isIP(bucket) !== 0) {
      return {
        style: 'refused',
        reason:
          `Host "${host}" names "${bucket}" under the domain "${domain}", which is not an S3 bucket name ` +
          '(3-63 lower-case letters, digits, "." and "-")',
      };
    }
    return { style: 'virtual', bucket };
  }
  return {
    style: 'refused',
    reason:
      domains === null
        ? `Host "${host}" may name a bucket (virtual-hosted style, bucket.domain), and the upstream declares ` +
          'no virtualHostDomains: send path-style requests (/bucket/key; the AWS SDK: forcePathStyle: true) ' +
          "to an IP address, a name without a dot or the storage's own name, or declare the domains the " +
          "storage serves virtual-hosted buckets under in the upstream's virtualHostDomains ([] when it serves none)"
        : `Host "${host}" is not under the upstream's virtualHostDomains (${domains.join(', ')}) and may name ` +
          'a bucket under a domain the gateway was not told of: send it to one of them, or declare its domain',
  };
}

function settingsOf(upstream: CompiledUpstream): S3HostSettings {
  return upstream.settings.s3 as S3HostSettings;
}

function refused(host: string | undefined, detail: string): ProblemError {
  // A refusal clients may repeat at any rate: no stack trace (ProblemError.expected).
  return ProblemError.expected('virtual-host-refused', detail, { host });
}

/** The Host addressing of `policy`'s s3 upstreams; null when it has none. */
export function s3HostAddressing(policy: CompiledPolicy): HostAddressing | null {
  const upstreams = Object.values(policy.upstreams).filter((u) => u.kind === 's3');
  if (upstreams.length === 0) return null;
  const declaring = upstreams.filter((u) => (settingsOf(u).virtualHostDomains?.length ?? 0) > 0);
  return {
    prefix(host: string | undefined): HostPrefix | null {
      for (const upstream of declaring) {
        const style = hostStyle(host, settingsOf(upstream));
        if (style.style === 'virtual') return { segment: style.bucket, upstream };
      }
      return null;
    },
    refusal(route: CompiledRoute, host: string | undefined, prefix: HostPrefix | null): ProblemError | null {
      const upstream = route.upstream;
      const style: HostStyle = upstream.kind === 's3' ? hostStyle(host, settingsOf(upstream)) : PATH;
      if (style.style === 'refused') return refused(host, style.reason);
      const bucket = style.style === 'virtual' ? style.bucket : null;
      if (bucket === (prefix?.segment ?? null)) return null;
      return refused(
        host,
        `Host "${host}" names the bucket "${prefix?.segment ?? bucket}" for upstream ` +
          `"${prefix?.upstream.name ?? upstream.name}", but the request was routed to route "${route.name}" ` +
          `of upstream "${upstream.name}", which reads ${bucket === null ? 'no bucket' : `the bucket "${bucket}"`} from it`,
      );
    },
  };
}
