/**
 * What the auth hook (src/auth/plugin.ts) decided about a request, for the route
 * handlers that need more than yes or no: the issuer binds owners to the principal,
 * and the listings (GET /v1/locks, the events) show only the keys the principal may
 * see. Without an auth file nothing is enforced and every key is visible.
 */
import type { FastifyRequest } from 'fastify';
import { may, prefixesFor, under, type Principal, type RouteVerb } from './model.js';

export interface RequestAccess {
  /** False when the control listener runs without an auth file. */
  enforced: boolean;
  /** The authenticated principal; null when nothing is enforced or none was needed. */
  principal: Principal | null;
}

const ACCESS = Symbol('fencegate.access');
const OPEN: RequestAccess = Object.freeze({ enforced: false, principal: null });

type WithAccess = FastifyRequest & { [ACCESS]?: RequestAccess };

export function setAccess(request: FastifyRequest, access: RequestAccess): void {
  (request as WithAccess)[ACCESS] = access;
}

export function accessOf(request: FastifyRequest): RequestAccess {
  return (request as WithAccess)[ACCESS] ?? OPEN;
}

/** The principal the request's leases are bound to, or null when auth is off. */
export function boundPrincipal(request: FastifyRequest): string | null {
  const a = accessOf(request);
  return a.enforced ? (a.principal?.name ?? null) : null;
}

/**
 * The lock-key prefixes the request may see for `verb`, or null for every key (auth
 * off). Fails closed: enforced without a principal sees nothing.
 */
export function visiblePrefixes(request: FastifyRequest, verb: RouteVerb): string[] | null {
  const a = accessOf(request);
  if (!a.enforced) return null;
  return a.principal === null ? [] : prefixesFor(a.principal, verb);
}

/** A predicate over lock keys for a listing, or undefined for every key. */
export function visibleKeys(
  request: FastifyRequest,
  verb: RouteVerb,
): ((key: string) => boolean) | undefined {
  const prefixes = visiblePrefixes(request, verb);
  if (prefixes === null || prefixes.includes('')) return undefined;
  return (key) => under(prefixes, key);
}

/**
 * A rule `on: 'body-keys'` (src/auth/plugin.ts), judged once the body is read: the first
 * of `keys` the principal may not `verb`, or null when it may every one (or auth is off).
 */
export function keyRefused(request: FastifyRequest, verb: RouteVerb, keys: readonly string[]): string | null {
  const a = accessOf(request);
  if (!a.enforced) return null;
  for (const key of keys) if (a.principal === null || !may(a.principal, verb, key)) return key;
  return null;
}
