/**
 * Routes are matched first to last, so an earlier route takes every request it matches.
 * When that request is one a later fenced route declares, the earlier route decides how
 * the write is handled: if it is unfenced, in shadow mode, or fenced by a different lock,
 * the write reaches the upstream without the fence the later route promises (so too under
 * a weaker check: `token` before `sequencer`). Such a
 * policy is refused, naming both routes, rather than loaded with a fence that never runs,
 * unless the earlier route lists the later one in `shadows` (taking them is its purpose).
 *
 * Two routes take a common request when their methods overlap and some path matches both
 * patterns (a parameter whose `params` rule refuses the other's literal does not match it;
 * two parameters are assumed to overlap). Two fenced routes guard it the same way when, for every such path, their lock
 * templates render the same key: compared position by position, a path parameter stands
 * for the path segment it captures, whatever each route names it.
 */
import type { CompiledRoute } from './model.js';
import type { PathPattern } from './path-pattern.js';
import type { TemplatePart } from './template.js';
import type { FenceCheck } from '../store/types.js';

export interface Shadowing {
  /** Index (in route order) of the route that takes the requests. */
  earlier: number;
  /** Index of the fenced route that declares them. */
  later: number;
  reason: string;
}

/** Every (earlier, later) pair where the earlier route takes writes the later fenced route declares. */
export function findShadowing(routes: readonly CompiledRoute[]): Shadowing[] {
  const found: Shadowing[] = [];
  routes.forEach((later, j) => {
    if (later.lock === null || later.fencing === null) return;
    for (let i = 0; i < j; i++) {
      const earlier = routes[i];
      if (earlier === undefined || earlier.shadows.includes(later.name)) continue;
      const methods = later.methods.filter((m) => earlier.methods.includes(m));
      if (methods.length === 0 || !pathsOverlap(earlier.path, later.path)) continue;
      const reason = weaker(earlier, later);
      if (reason !== null) found.push({ earlier: i, later: j, reason: `${reason} (${methods.join(', ')})` });
    }
  });
  return found;
}

/**
 * What a check stops, in order: `token` a stale owner; `lease` also an owner whose lease
 * lapsed; `sequencer` also a client that learnt or guessed a token number.
 */
const CHECK_STRENGTH: Record<FenceCheck, number> = { token: 0, lease: 1, sequencer: 2 };

/** Why `earlier` does not fence the requests it takes from `later` as `later` would; null when it does. */
function weaker(earlier: CompiledRoute, later: CompiledRoute): string | null {
  if (earlier.lock === null || earlier.fencing === null) return 'it is not fenced';
  if (later.fencing?.enforce === true && !earlier.fencing.enforce) return 'it only shadows the fence';
  const [mine, theirs] = [earlier.fencing.check, later.fencing?.check ?? 'token'];
  if (CHECK_STRENGTH[mine] < CHECK_STRENGTH[theirs]) return `its check "${mine}" is weaker than "${theirs}"`;
  if (!sameLock(earlier, later))
    return `its lock "${earlier.lock.source}" differs from "${later.lock?.source}"`;
  return null;
}

/** Some request path matches both patterns. */
export function pathsOverlap(a: PathPattern, b: PathPattern): boolean {
  const shared = Math.min(a.segments.length, b.segments.length);
  for (let i = 0; i < shared; i++) {
    const x = a.segments[i];
    const y = b.segments[i];
    if (x?.kind === 'literal' && y?.kind === 'literal' && x.value !== y.value) return false;
    // A literal the other route's parameter rule refuses: that route never takes it.
    if (x?.kind === 'literal' && y?.kind === 'param' && b.constraints?.[y.name]?.test(x.value) === false)
      return false;
    if (y?.kind === 'literal' && x?.kind === 'param' && a.constraints?.[x.name]?.test(y.value) === false)
      return false;
  }
  if (a.segments.length === b.segments.length) return true;
  // The longer pattern's extra segments must be taken by the shorter one's wildcard.
  return a.segments.length < b.segments.length ? a.wildcard : b.wildcard;
}

/** Both templates render the same key for every request both routes match. */
function sameLock(a: CompiledRoute, b: CompiledRoute): boolean {
  const x = normalisedParts(a);
  const y = normalisedParts(b);
  return x.length === y.length && x.every((part, i) => part === y[i]);
}

/** A template's parts with path parameters replaced by the position they capture. */
function normalisedParts(route: CompiledRoute): string[] {
  const parts: string[] = [];
  let text = '';
  const flush = () => {
    if (text.length > 0) parts.push(`t:${text}`);
    text = '';
  };
  for (const part of route.lock?.parts ?? []) {
    if (part.kind === 'text') {
      text += part.value;
      continue;
    }
    flush();
    parts.push(placeholder(route.path, part));
  }
  flush();
  return parts;
}

function placeholder(path: PathPattern, part: Exclude<TemplatePart, { kind: 'text' }>): string {
  if (part.kind === 'header') return `h:${part.name}`;
  if (path.rest === part.name) return `rest:${path.segments.length}`;
  const index = path.segments.findIndex((s) => s.kind === 'param' && s.name === part.name);
  return `seg:${index}`;
}
