/**
 * The registry of downstream kinds: one line per kind. See ./types.ts for what a kind
 * is, and docs/adr/0006-downstream-kinds.md for what it must do to keep the promises.
 * The policy compiler gets this registry from the composition root (src/serve.ts passes it to
 * PolicyHolder.openFor; src/policies.ts binds it for `fencegate check` and tests).
 */
import { httpKind } from './http/index.js';
import { postgresKind } from './postgres/index.js';
import { s3Kind } from './s3/index.js';
import type { DownstreamKind } from './types.js';

export type { DownstreamKind, KindRuntime, KindRequest, WriteSet, ResourceFence } from './types.js';

// No prototype: a policy's `kind: constructor` must not find Object.prototype members.
export const KINDS: Readonly<Record<string, DownstreamKind>> = Object.freeze(
  Object.assign(Object.create(null) as Record<string, DownstreamKind>, {
    http: httpKind,
    postgres: postgresKind,
    s3: s3Kind,
  }),
);

export function kindFor(name: string): DownstreamKind | null {
  return KINDS[name] ?? null;
}
