/**
 * The policy layer bound to the gateway's kinds: the composition root hands the kind
 * registry (src/gateway/kinds/index.ts) to the policy compiler here, so the compiler
 * itself never imports the gateway. `fencegate serve`, `fencegate check`, the workers
 * and tests load policies through this module.
 */
import { KINDS } from './gateway/kinds/index.js';
import {
  loadPolicies as loadPoliciesFor,
  parsePolicyText as parsePolicyTextFor,
  PolicyHolder as KindsPolicyHolder,
  type CompiledPolicy,
  type LoadResult,
} from './policy/index.js';

export * from './policy/index.js';

/** Loads the policy at `path` (a file or a directory) for the registered kinds. */
export function loadPolicies(path: string): Promise<LoadResult> {
  return loadPoliciesFor(path, KINDS);
}

/** Parses and schema-checks one file's text for the registered kinds. */
export function parsePolicyText(file: string, text: string): ReturnType<typeof parsePolicyTextFor> {
  return parsePolicyTextFor(file, text, KINDS);
}

/** The live policy of the registered kinds. */
export class PolicyHolder extends KindsPolicyHolder {
  constructor(path: string, initial?: CompiledPolicy) {
    super(path, KINDS, initial);
  }

  /** Loads `path` for the first time (PolicyHolder.openFor in src/policy/holder.ts). */
  static open(
    path: string,
    options: { mayBeMissing?: boolean } = {},
  ): ReturnType<typeof KindsPolicyHolder.openFor> {
    return KindsPolicyHolder.openFor(path, KINDS, options);
  }
}
