/**
 * Semantic checks across all schema-valid policy files, and compilation into the
 * frozen route table. Checks: upstream URLs, duplicate upstream and route names
 * (across files), routes naming unknown upstreams, path syntax, lock templates
 * (syntax, unknown path parameters, forbidden headers), `fencing` without `lock`, and
 * earlier routes that would take a later fenced route's writes unfenced (shadowing.ts).
 */
import { expandEnv, type Env } from './env.js';
import type { PolicyError } from './errors.js';
import type { PolicyKind, PolicyKinds } from './kinds.js';
import {
  createCompiledPolicy,
  DEFAULTS,
  type CompiledPolicy,
  type CompiledRoute,
  type CompiledUpstream,
} from './model.js';
import { constrainParams, parsePathPattern } from './path-pattern.js';
import { compileIdempotency } from './idempotency.js';
import { findShadowing } from './shadowing.js';
import type { RawPolicyFile, RawRoute } from './schema.js';
import type { PolicySource } from './source.js';
import { parseLockTemplate, templateParams } from './template.js';
import { compileUpstreamTls } from './upstream-tls.js';

export interface ValidFile {
  source: PolicySource;
  data: RawPolicyFile;
}

export type CompileResult = { ok: true; policy: CompiledPolicy } | { ok: false; errors: PolicyError[] };

/** Compiles schema-valid files for `kinds` (the registry the composition root hands in). */
export function compilePolicy(
  files: readonly ValidFile[],
  kinds: PolicyKinds,
  env: Env = process.env,
): CompileResult {
  const errors: PolicyError[] = [];
  // No prototype: upstream names are user-chosen ("constructor", "toString" are valid names).
  const upstreams = Object.create(null) as Record<string, CompiledUpstream>;
  const upstreamSeenAt = new Map<string, PolicyError>();
  /**
   * The kind each declared upstream names (null: an unknown kind), also for an upstream
   * that did not compile: its routes' fields are judged by the kind it declares, so one
   * bad upstream (an unset ${ENV} in its url) is one error, not one per route field.
   */
  const declaredKinds = new Map<string, PolicyKind | null>();

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
      const kind = Object.hasOwn(kinds, raw.kind) ? (kinds[raw.kind] ?? null) : null;
      declaredKinds.set(name, kind);
      if (kind === null) {
        const known = Object.keys(kinds).join(', ');
        errors.push(
          source.error(['upstreams', name, 'kind'], `unknown kind "${raw.kind}" (known: ${known})`),
        );
        continue;
      }
      // Fields that belong to other kinds (a postgres `pooler` on an http upstream) are errors.
      const foreign = foreignField(kinds, kind, raw, (k) => k.upstreamFields);
      if (foreign !== null) {
        const message = `only ${foreign.kind} upstreams take "${foreign.field}" (this one is ${kind.name})`;
        errors.push(source.error(['upstreams', name, foreign.field], message));
        continue;
      }
      const url = expandEnv(raw.url, env);
      if (!url.ok) {
        errors.push(source.error(['upstreams', name, 'url'], url.message));
        continue;
      }
      const compiled = kind.compileUpstream(name, { ...raw, url: url.value });
      if (!compiled.ok) {
        for (const e of compiled.errors)
          errors.push(source.error(['upstreams', name, ...e.field], e.message));
        continue;
      }
      const methodOverride = raw.methodOverride ?? 'strip';
      if (methodOverride === 'honour' && kind.name !== 'http') {
        errors.push(
          source.error(
            ['upstreams', name, 'methodOverride'],
            `only http upstreams honour method-override headers (this one is ${kind.name})`,
          ),
        );
        continue;
      }
      const tls = compileUpstreamTls(raw.tls, kind.name, compiled.upstream.origin, source.file);
      if (tls.ok) upstreams[name] = { ...compiled.upstream, tls: tls.tls, methodOverride };
      else for (const e of tls.errors) errors.push(source.error(['upstreams', name, ...e.field], e.message));
    }
  }

  const routes: CompiledRoute[] = [];
  /** Where each compiled route was declared, for errors about it. */
  const declared: { source: PolicySource; index: number }[] = [];
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
      const route = compileRoute(kinds, raw, upstreams, declaredKinds, (field, message) =>
        errors.push(source.error(at(...field), message)),
      );
      if (route !== null) {
        routes.push({ ...route, file: source.file, line: source.position(at()).line });
        declared.push({ source, index });
      }
    });
  }

  if (errors.length === 0) {
    routes.forEach((route, i) => {
      const at = declared[i];
      route.shadows.forEach((name, k) => {
        const later = routes.findIndex((r) => r.name === name);
        if (later <= i && at !== undefined)
          errors.push(
            at.source.error(
              ['routes', at.index, 'shadows', k],
              later < 0 ? `unknown route "${name}"` : `route "${name}" comes before this one`,
            ),
          );
      });
    });
    for (const s of findShadowing(routes)) {
      const earlier = routes[s.earlier];
      const later = routes[s.later];
      const at = declared[s.earlier];
      if (earlier === undefined || later === undefined || at === undefined) continue;
      errors.push(
        at.source.error(
          ['routes', at.index, 'path'],
          `route "${earlier.name}" comes first and takes writes that the fenced route "${later.name}" ` +
            `(${later.file}:${later.line}) declares, but ${s.reason}: move "${later.name}" above it, ` +
            `narrow its path or methods, fence it with the same lock, or, if it must take them, ` +
            `list "${later.name}" in its "shadows"`,
        ),
      );
    }
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
  kinds: PolicyKinds,
  raw: RawRoute,
  upstreams: Record<string, CompiledUpstream>,
  declaredKinds: ReadonlyMap<string, PolicyKind | null>,
  report: Report,
): Omit<CompiledRoute, 'file' | 'line'> | null {
  let ok = true;
  const fail: Report = (field, message) => {
    ok = false;
    report(field, message);
  };
  const upstream = Object.hasOwn(upstreams, raw.upstream) ? upstreams[raw.upstream] : undefined;
  if (!declaredKinds.has(raw.upstream)) fail(['upstream'], `unknown upstream "${raw.upstream}"`);

  let path = parsePathPattern(raw.path);
  if (!path.ok) fail(['path'], path.reason);
  else if (raw.params !== undefined) {
    const constrained = constrainParams(path.pattern, raw.params);
    if (constrained.ok) path = constrained;
    else for (const e of constrained.errors) fail(['params', e.param], e.reason);
  }

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

  // Fields that belong to other kinds (a postgres `table` on an http route) are errors,
  // judged by the kind the upstream declares (compiled or not); an unknown upstream or
  // kind was reported already, and says nothing about which fields its routes may take.
  const kind = declaredKinds.get(raw.upstream) ?? null;
  if (kind !== null) {
    for (const other of Object.values(kinds)) {
      if (other === kind) continue;
      for (const field of Object.keys(other.routeFields)) {
        if (raw[field] !== undefined && !Object.hasOwn(kind.routeFields, field))
          fail([field], `only routes of a "${other.name}" upstream take "${field}"`);
      }
    }
  }
  let target: Readonly<Record<string, unknown>> = {};
  if (kind !== null && upstream !== undefined && path.ok) {
    const compiled = kind.compileRoute(raw, upstream, path.pattern);
    if (compiled.ok) target = compiled.target;
    else for (const e of compiled.errors) fail(e.field, e.message);
  }

  const idempotency = compileIdempotency(raw, kind, kinds);
  if (!idempotency.ok) fail(idempotency.field, idempotency.message);

  if (!ok || upstream === undefined || !path.ok || !idempotency.ok) return null;
  const fencing =
    lock === null
      ? null
      : {
          check: raw.fencing?.check ?? DEFAULTS.check,
          enforce: raw.fencing?.enforce ?? DEFAULTS.enforce,
          drainTimeoutMs: raw.fencing?.drainTimeoutMs ?? DEFAULTS.drainTimeoutMs,
        };
  const upload = { ...DEFAULTS.upload, ...raw.upload };
  return {
    name: raw.name,
    methods: [...raw.methods],
    path: path.pattern,
    upstream,
    lock,
    fencing,
    upload,
    idempotency: idempotency.settings,
    shadows: [...(raw.shadows ?? [])],
    target,
  };
}

/** The first field `raw` sets that another kind owns (and `kind` does not), in registry order. */
function foreignField(
  kinds: PolicyKinds,
  kind: PolicyKind,
  raw: Readonly<Record<string, unknown>>,
  fieldsOf: (k: PolicyKind) => Readonly<Record<string, object>>,
): { kind: string; field: string } | null {
  for (const other of Object.values(kinds)) {
    if (other === kind) continue;
    for (const field of Object.keys(fieldsOf(other))) {
      if (raw[field] !== undefined && !Object.hasOwn(fieldsOf(kind), field))
        return { kind: other.name, field };
    }
  }
  return null;
}

function where(e: PolicyError): string {
  return `${e.file}:${e.line}:${e.column}`;
}
