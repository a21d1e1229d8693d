/**
 * Semantic checks across all schema-valid policy files, and compilation into the
 * frozen route table. Checks: upstream URLs, duplicate upstream and route names
 * (across files), routes naming unknown upstreams, path syntax, lock templates
 * (syntax, unknown path parameters, forbidden headers), `fencing` without `lock`.
 */
import type { PolicyError } from './errors.js';
import {
  createCompiledPolicy,
  DEFAULTS,
  type CompiledPolicy,
  type CompiledRoute,
  type CompiledUpstream,
} from './model.js';
import { parsePathPattern } from './path-pattern.js';
import type { RawPolicyFile, RawRoute, RawUpstream } from './schema.js';
import type { PolicySource } from './source.js';
import { parseLockTemplate, templateParams } from './template.js';

export interface ValidFile {
  source: PolicySource;
  data: RawPolicyFile;
}

export type CompileResult = { ok: true; policy: CompiledPolicy } | { ok: false; errors: PolicyError[] };

export function compilePolicy(files: readonly ValidFile[]): CompileResult {
  const errors: PolicyError[] = [];
  // No prototype: upstream names are user-chosen ("constructor", "toString" are valid names).
  const upstreams = Object.create(null) as Record<string, CompiledUpstream>;
  const upstreamSeenAt = new Map<string, PolicyError>();

  for (const { source, data } of files) {
    for (const [name, raw] of Object.entries(data.upstreams ?? {})) {
      const here = source.error(['upstreams', name], '', 'key');
      const first = upstreamSeenAt.get(name);
      if (first !== undefined) {
        errors.push({
          ...here,
          message: `duplicate upstream name "${name}" (first defined at ${where(first)})`,
        });
        continue;
      }
      upstreamSeenAt.set(name, here);
      const compiled = compileUpstream(name, raw);
      if (typeof compiled === 'string') errors.push(source.error(['upstreams', name, 'url'], compiled));
      else upstreams[name] = compiled;
    }
  }

  const routes: CompiledRoute[] = [];
  const routeSeenAt = new Map<string, PolicyError>();
  for (const { source, data } of files) {
    (data.routes ?? []).forEach((raw, index) => {
      const at = (...field: (string | number)[]) => ['routes', index, ...field];
      const nameAt = source.error(at('name'), '');
      const first = routeSeenAt.get(raw.name);
      if (first !== undefined) {
        errors.push({
          ...nameAt,
          message: `duplicate route name "${raw.name}" (first defined at ${where(first)})`,
        });
      } else {
        routeSeenAt.set(raw.name, nameAt);
      }
      const route = compileRoute(raw, upstreams, upstreamSeenAt.has(raw.upstream), (field, message) =>
        errors.push(source.error(at(...field), message)),
      );
      if (route !== null) routes.push({ ...route, file: source.file, line: source.position(at()).line });
    });
  }

  if (errors.length > 0) return { ok: false, errors };
  return {
    ok: true,
    policy: createCompiledPolicy(
      files.map((f) => f.source.file),
      upstreams,
      routes,
    ),
  };
}

type Report = (field: (string | number)[], message: string) => void;

function compileRoute(
  raw: RawRoute,
  upstreams: Record<string, CompiledUpstream>,
  upstreamDeclared: boolean,
  report: Report,
): Omit<CompiledRoute, 'file' | 'line'> | null {
  let ok = true;
  const fail: Report = (field, message) => {
    ok = false;
    report(field, message);
  };
  const upstream = Object.hasOwn(upstreams, raw.upstream) ? upstreams[raw.upstream] : undefined;
  if (!upstreamDeclared) fail(['upstream'], `unknown upstream "${raw.upstream}"`);

  const path = parsePathPattern(raw.path);
  if (!path.ok) fail(['path'], path.reason);

  let lock = null;
  if (raw.lock !== undefined) {
    const parsed = parseLockTemplate(raw.lock);
    if (!parsed.ok) {
      fail(['lock'], parsed.reason);
    } else {
      lock = parsed.template;
      const known = path.ok ? path.pattern.params : [];
      for (const param of templateParams(parsed.template)) {
        if (path.ok && !known.includes(param)) fail(['lock'], `references unknown path parameter "${param}"`);
      }
    }
  } else if (raw.fencing !== undefined) {
    fail(['fencing'], 'fencing settings need a "lock" on the route');
  }

  if (!ok || upstream === undefined || !path.ok) return null;
  const fencing =
    lock === null
      ? null
      : {
          check: raw.fencing?.check ?? DEFAULTS.check,
          enforce: raw.fencing?.enforce ?? DEFAULTS.enforce,
          drainTimeoutMs: raw.fencing?.drainTimeoutMs ?? DEFAULTS.drainTimeoutMs,
        };
  const upload = { ...DEFAULTS.upload, ...raw.upload };
  return { name: raw.name, methods: [...raw.methods], path: path.pattern, upstream, lock, fencing, upload };
}

function compileUpstream(name: string, raw: RawUpstream): CompiledUpstream | string {
  let url: URL;
  try {
    url = new URL(raw.url);
  } catch {
    return `"${raw.url}" is not a valid URL`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `must be an http:// or https:// URL`;
  if (url.username !== '' || url.password !== '') return 'must not contain credentials';
  if (url.search !== '' || url.hash !== '' || raw.url.includes('?') || raw.url.includes('#')) {
    return 'must not contain a query or fragment';
  }
  const basePath = url.pathname.replace(/\/+$/, '');
  return {
    name,
    kind: raw.kind,
    url: url.href,
    origin: url.origin,
    basePath,
    timeoutMs: raw.timeoutMs ?? DEFAULTS.timeoutMs,
    breaker: { ...DEFAULTS.breaker, ...raw.breaker },
  };
}

function where(e: PolicyError): string {
  return `${e.file}:${e.line}:${e.column}`;
}
