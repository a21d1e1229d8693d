/** Policy compiler: YAML files → validated, frozen route table, with a reloadable holder. */
export { formatPolicyError, type PolicyError } from './errors.js';
export { loadPolicies, parsePolicyText, type LoadResult } from './load.js';
export { EMPTY_POLICY, PolicyHolder, type ReloadResult, type WatchOptions } from './holder.js';
export type {
  BreakerSettings,
  CompiledPolicy,
  CompiledRoute,
  CompiledUpstream,
  FencingSettings,
  IdempotencySettings,
  RouteMatch,
} from './model.js';
export { DEFAULTS as POLICY_DEFAULTS } from './model.js';
export { splitRequestPath, parsePathPattern, matchPath, type PathPattern } from './path-pattern.js';
export { parseLockTemplate, renderLock, type LockTemplate, type HeaderLookup } from './template.js';
export { idempotentMethod } from './idempotency.js';
export { HTTP_METHODS, type HttpMethod } from './schema.js';
export type {
  FieldError,
  FieldSchemas,
  PolicyKind,
  PolicyKinds,
  RouteCompileResult,
  UpstreamCompileResult,
} from './kinds.js';
