/**
 * What the policy compiler needs of a downstream kind: its own policy fields (a JSON
 * Schema fragment for upstreams and one for routes, merged into the policy file schema)
 * and how it compiles an upstream and a route. The registry of kinds lives above the
 * policy layer (src/gateway/kinds/index.ts); the composition root hands it in (src/policies.ts),
 * so the compiler never imports the gateway. docs/adr/0006-downstream-kinds.md.
 */
import type { CompiledUpstream } from './model.js';
import type { PathPattern } from './path-pattern.js';
import type { FieldSchemas, KindFields, RawRoute, RawUpstream } from './schema.js';

/** A policy error at a field below the upstream or route being compiled. */
export interface FieldError {
  field: (string | number)[];
  message: string;
}

export type UpstreamCompileResult =
  // `tls` and `methodOverride` are compiled by the policy compiler for every kind (./compile.ts).
  | { ok: true; upstream: Omit<CompiledUpstream, 'tls' | 'methodOverride'> }
  | { ok: false; errors: FieldError[] };

export type RouteCompileResult =
  { ok: true; target: Readonly<Record<string, unknown>> } | { ok: false; errors: FieldError[] };

export type { FieldSchemas } from './schema.js';

export interface PolicyKind extends KindFields {
  readonly name: string;
  /**
   * Upstream fields only this kind takes (e.g. postgres: pooler, poolSize), with their
   * schema. An upstream of another kind that sets one is an error naming the field.
   */
  readonly upstreamFields: FieldSchemas;
  /**
   * Route fields only this kind takes (e.g. postgres: table, key, columns), with their
   * schema. A route of another kind that sets one is an error naming the field.
   */
  readonly routeFields: FieldSchemas;
  /**
   * Its answers are upstream HTTP responses the gateway can keep and replay: routes of this
   * kind may declare `idempotency` (docs/gateway.md, "Idempotency"). Absent: they may not.
   */
  readonly replayable?: boolean;
  /** Policy time: validates the upstream (URL scheme, kind settings) and compiles it. */
  compileUpstream(name: string, raw: RawUpstream): UpstreamCompileResult;
  /** Policy time: validates this kind's route fields against the route's path and upstream. */
  compileRoute(raw: RawRoute, upstream: CompiledUpstream, path: PathPattern): RouteCompileResult;
}

/** Kinds by name, without a prototype (a policy's `kind: constructor` must find nothing). */
export type PolicyKinds = Readonly<Record<string, PolicyKind>>;
