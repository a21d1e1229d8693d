/**
 * Authentication and authorisation on the control listener: one onRequest hook that
 * finds the request's principal and judges it against the route's rule, below. One
 * table, so what each route needs is written in one place; a route with no rule stops
 * the listener at boot (and would be refused to everyone). docs/security.md.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { ProblemError } from '../errors.js';
import { sendProblem } from '../http/problems.js';
import type { Metrics } from '../observe/metrics.js';
import { setAccess } from './access.js';
import type { Authenticator } from './authenticate.js';
import { may, mayReadStatus, prefixesFor, type PublicEndpoint, type RouteVerb } from './model.js';

export type AccessRule =
  /** Static files with no data (the dashboard page): served to anyone. */
  | { open: true }
  /** Served without credentials while the auth file lists it under `public`; else any principal. */
  | { endpoint: PublicEndpoint }
  /** The verb on the lock named by the `:key` parameter. */
  | { verb: RouteVerb; on: 'key' }
  /** The verb on some prefix; the handler shows only the keys under the principal's prefixes. */
  | { verb: RouteVerb; on: 'listing' }
  /**
   * The verb on some prefix here; the handler then refuses unless the principal has it on
   * every key of the body (`keysAllowed`), which this hook cannot see yet (acquire-many).
   */
  | { verb: RouteVerb; on: 'body-keys' }
  /** /v1/status and /v1/upstreams: `read` or `admin` on any prefix. */
  | { status: true };

const KEY_VERBS: Record<string, RouteVerb> = {
  'POST /v1/locks/:key/acquire': 'acquire',
  'POST /v1/locks/:key/renew': 'renew',
  'POST /v1/locks/:key/release': 'release',
  'GET /v1/locks/:key': 'read',
};

/** Every route of the control listener, by method (HEAD as GET) and route pattern. */
export const ACCESS_RULES: Readonly<Record<string, AccessRule>> = Object.freeze({
  ...Object.fromEntries(Object.entries(KEY_VERBS).map(([route, verb]) => [route, { verb, on: 'key' }])),
  'POST /v1/locks/acquire-many': { verb: 'acquire', on: 'body-keys' },
  'GET /v1/locks': { verb: 'read', on: 'listing' },
  'GET /v1/events': { verb: 'events', on: 'listing' },
  'GET /v1/events/stream': { verb: 'events', on: 'listing' },
  'GET /v1/status': { status: true },
  'GET /v1/upstreams': { status: true },
  'GET /v1/keys': { endpoint: 'keys' },
  'GET /healthz': { endpoint: 'healthz' },
  'GET /readyz': { endpoint: 'readyz' },
  'GET /metrics': { endpoint: 'metrics' },
  'GET /v1/openapi.json': { open: true },
  'GET /dashboard': { open: true },
  'GET /dashboard/app.js': { open: true },
  'GET /dashboard/style.css': { open: true },
  'GET /dashboard/favicon.svg': { open: true },
} satisfies Record<string, AccessRule>);

/** The rule of the route a request matched; undefined when it matched none (404) or has no rule. */
export function ruleFor(method: string, url: string | undefined): AccessRule | undefined {
  if (url === undefined) return undefined;
  return ACCESS_RULES[`${method === 'HEAD' ? 'GET' : method} ${url}`];
}

/** 401: the same answer for no credential, an unknown key and a wrong one. */
export function unauthenticated(): ProblemError {
  return new ProblemError(
    'unauthenticated',
    'this listener needs a credential: an API key (Authorization: Bearer <key>) or a client certificate',
    {},
    { headers: { 'www-authenticate': 'Bearer realm="fencegate"' } },
  );
}

function forbidden(principal: string, what: string, extra: Record<string, unknown> = {}): ProblemError {
  return new ProblemError('forbidden', `principal "${principal}" may not ${what}`, {
    principal,
    ...extra,
  });
}

async function authPlugin(
  app: FastifyInstance,
  opts: { authenticator: Authenticator; metrics?: Metrics },
): Promise<void> {
  const { authenticator, metrics } = opts;
  // Fails at boot, not at the first request: a route registered after this plugin
  // without a rule in ACCESS_RULES stops the listener from starting.
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      if (ruleFor(method, route.url) === undefined)
        throw new Error(`control route ${method} ${route.url} has no access rule (src/auth/plugin.ts)`);
    }
  });
  app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
    const url = request.routeOptions.url;
    const rule = ruleFor(request.method, url);
    if (rule !== undefined && 'open' in rule) return;
    if (rule !== undefined && 'endpoint' in rule && authenticator.config.public.has(rule.endpoint)) return;
    let auth;
    try {
      auth = await authenticator.authenticate(request.headers.authorization, request.raw.socket);
    } catch (err) {
      // 429 auth-throttled or auth-busy: the key was not looked at.
      if (!(err instanceof ProblemError)) throw err;
      metrics?.authRefusals.inc({ reason: err.code === 'auth-busy' ? 'busy' : 'throttled' });
      return sendProblem(reply, err);
    }
    if (!auth.ok || auth.principal === null) return sendProblem(reply, unauthenticated());
    const principal = auth.principal;
    setAccess(request, { enforced: true, principal });
    if (url === undefined) return; // no such route: the 404 says so, to an authenticated client only
    const refusal = judge(rule, principal, request);
    if (refusal !== null) return sendProblem(reply, refusal);
  });
  // Counted by status, so the issuer's own 403 (a lease another principal took) counts too:
  // on the control listener 401 and 403 come only from the auth rules.
  if (metrics !== undefined) {
    app.addHook('onResponse', async (_request, reply) => {
      if (reply.statusCode === 401) metrics.authRefusals.inc({ reason: 'unauthenticated' });
      else if (reply.statusCode === 403) metrics.authRefusals.inc({ reason: 'forbidden' });
    });
  }
}

function judge(
  rule: AccessRule | undefined,
  principal: Parameters<typeof may>[0],
  request: FastifyRequest,
): ProblemError | null {
  if (rule === undefined)
    return forbidden(principal.name, `use ${request.method} ${request.routeOptions.url}`);
  if ('endpoint' in rule) return null; // not public: any principal
  if ('status' in rule) return mayReadStatus(principal) ? null : forbidden(principal.name, 'read /v1/status');
  if ('open' in rule) return null;
  if (rule.on === 'listing' || rule.on === 'body-keys') {
    return prefixesFor(principal, rule.verb).length > 0
      ? null
      : forbidden(principal.name, `${rule.verb} any lock`, { verb: rule.verb });
  }
  const key = (request.params as { key?: unknown }).key;
  if (typeof key === 'string' && may(principal, rule.verb, key)) return null;
  return forbidden(principal.name, `${rule.verb} lock "${String(key)}"`, { verb: rule.verb, lock: key });
}

export default fp(authPlugin, { name: 'fencegate-auth', fastify: '5.x' });
