/**
 * Policy-time compilation of an upstream reached over HTTP(S): the `http` kind's, and
 * the base of any kind that speaks HTTP to its upstream (s3).
 */
import { DEFAULTS } from '../../../policy/model.js';
import type { RawUpstream } from '../../../policy/schema.js';
import type { UpstreamCompileResult } from '../../../policy/kinds.js';

export function compileHttpUpstream(name: string, raw: RawUpstream): UpstreamCompileResult {
  const bad = (message: string): UpstreamCompileResult => ({
    ok: false,
    errors: [{ field: ['url'], message }],
  });
  let url: URL;
  try {
    url = new URL(raw.url);
  } catch {
    return bad(`"${raw.url}" is not a valid URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return bad('must be an http:// or https:// URL');
  if (url.username !== '' || url.password !== '') return bad('must not contain credentials');
  if (url.search !== '' || url.hash !== '' || raw.url.includes('?') || raw.url.includes('#')) {
    return bad('must not contain a query or fragment');
  }
  return {
    ok: true,
    upstream: {
      name,
      kind: raw.kind,
      url: url.href,
      origin: url.origin,
      basePath: url.pathname.replace(/\/+$/, ''),
      timeoutMs: raw.timeoutMs ?? DEFAULTS.timeoutMs,
      breaker: { ...DEFAULTS.breaker, ...raw.breaker },
      settings: {},
    },
  };
}
