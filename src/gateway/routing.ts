/**
 * Route resolution, before anything else runs: a request that matches no route is
 * answered 404 no-route here and never reaches an upstream. Matching uses the policy
 * that is current when the request arrives, so reloads take effect for new requests.
 * Routing also settles how the request's refusals are written (its upstream's kind's
 * format; before a route is known, the one all the policy's upstreams share, if any) and
 * what its Host addresses: a kind that reads the Host (s3: a virtual-hosted bucket) may
 * put a segment before the path, or refuse a Host it cannot place.
 */
import { ProblemError } from '../errors.js';
import {
  splitRequestPath,
  type CompiledPolicy,
  type CompiledUpstream,
  type RouteMatch,
} from '../policy/index.js';
import { missingHost, pathOf, type ProblemFormat } from '../http/problems.js';
import type { GatewayRequestState } from './context.js';
import type { Exchange } from './exchange.js';
import { overridingMethod } from './headers.js';
import { KINDS, kindFor } from './kinds/index.js';
import type { HostAddressing } from './kinds/types.js';

/**
 * `?_method=PUT` (Rails, Laravel, Express's method-override) turns a request the gateway
 * routes by its real method (a GET: not fenced) into a write at the upstream. Refused,
 * also percent-encoded; unlike an override header it cannot be dropped without changing
 * the query the upstream would see.
 */
const METHOD_OVERRIDE_QUERY = /[?&](?:_|%5f)method(?:=|&|$|\[|%5b)/i;

const NO_OVERRIDE = { ok: true, method: null } as const;

/** What routing needs to know of a policy beyond its routes, worked out once per policy. */
interface PolicyFacts {
  /** Some upstream honours method-override headers. */
  readonly honoursOverrides: boolean;
  /** How Hosts address its upstreams; null when no kind reads the Host. */
  readonly hosts: HostAddressing | null;
  /**
   * How refusals are written before a route is known: the format of its upstreams' kind
   * when they all share one (a listener in front of S3 storage only serves S3 clients),
   * else null (problem+json).
   */
  readonly format: ProblemFormat | null;
}

const facts = new WeakMap<CompiledPolicy, PolicyFacts>();

function factsOf(policy: CompiledPolicy): PolicyFacts {
  let known = facts.get(policy);
  if (known === undefined) {
    const hosts: HostAddressing[] = [];
    for (const kind of Object.values(KINDS)) {
      const h = kind.hostAddressing?.(policy) ?? null;
      if (h !== null) hosts.push(h);
    }
    if (hosts.length > 1) throw new Error('more than one kind reads the Host');
    const upstreams = Object.values(policy.upstreams);
    const formats = new Set(upstreams.map(formatOf));
    known = {
      honoursOverrides: upstreams.some((u) => u.methodOverride === 'honour'),
      hosts: hosts[0] ?? null,
      format: formats.size === 1 ? ([...formats][0] ?? null) : null,
    };
    facts.set(policy, known);
  }
  return known;
}

/**
 * Routes `ex` by `policy`: its state, or null when the request was refused here (the
 * problem is already answered).
 */
export function routeRequest(ex: Exchange, policy: CompiledPolicy): GatewayRequestState | null {
  const { req } = ex;
  const { headers } = req;
  const { honoursOverrides, hosts, format } = factsOf(policy);
  ex.format = format;
  if (refusedFraming(ex)) return null;
  const url = req.url ?? '/';
  const path = pathOf(url);
  const split = splitRequestPath(path);
  if (!split.ok) {
    ex.answerProblem(new ProblemError('bad-request', split.reason));
    return null;
  }
  const override = overrideOf(ex, url, path, honoursOverrides);
  if (override === null) return null;
  // A Host that carries the path's first segment (a virtual-hosted S3 bucket) routes with it.
  const prefix = hosts === null ? null : hosts.prefix(headers.host);
  let segments = split.segments;
  let routedPath = path;
  if (prefix !== null) {
    segments = [prefix.segment, ...segments];
    routedPath = `/${prefix.segment}${path === '/' ? '' : path}`;
    ex.format = formatOf(prefix.upstream);
  }
  let method = ex.method;
  let match: RouteMatch | null = null;
  if (override.method !== null) {
    const byOverride = policy.match(override.method, segments);
    if (byOverride !== null && byOverride.route.upstream.methodOverride === 'honour') {
      match = byOverride;
      method = override.method;
    }
  }
  match ??= policy.match(method, segments);
  if (match === null) {
    ex.answerProblem(new ProblemError('no-route', `no route for ${ex.method} ${routedPath}`));
    return null;
  }
  // A Host that named a bucket keeps its upstream's format (a route that reads the Host
  // otherwise is refused just below, to the client that addressed that upstream).
  if (prefix === null) ex.format = formatOf(match.route.upstream);
  const refusal = hosts === null ? null : hosts.refusal(match.route, headers.host, prefix);
  if (refusal !== null) {
    ex.answerProblem(refusal);
    return null;
  }
  return { policy, match, method, path, routedPath, fence: null };
}

/**
 * Refuses (true: answered, the connection to be closed) a request whose framing or Host
 * cannot be trusted.
 */
function refusedFraming(ex: Exchange): boolean {
  const { req } = ex;
  const { headers } = req;
  // Node's parser already refuses this; kept so a lenient parser can never let a smuggling pair through.
  const problem =
    headers['content-length'] !== undefined && headers['transfer-encoding'] !== undefined
      ? new ProblemError('bad-request', 'both Content-Length and Transfer-Encoding are set')
      : missingHost(req);
  if (problem === null) return false;
  ex.header('connection', 'close');
  ex.answerProblem(problem);
  return true;
}

/**
 * The method a method-override header names (`method` null: none), or null when the
 * request was refused here for overriding its method (answered). An upstream that
 * honours method-override headers applies the method they name: the request is routed
 * and fenced by it, and only then are the headers forwarded (upstreamRequestHeaders).
 * Anywhere else they are dropped and the real method rules.
 */
function overrideOf(
  ex: Exchange,
  url: string,
  path: string,
  honoursOverrides: boolean,
): { ok: true; method: string | null } | null {
  if (path.length < url.length && METHOD_OVERRIDE_QUERY.test(url.slice(path.length))) {
    ex.answerProblem(
      new ProblemError(
        'bad-request',
        'a "_method" query parameter would override the method at the upstream; send the real method',
      ),
    );
    return null;
  }
  const override = honoursOverrides ? overridingMethod(ex.req.rawHeaders) : NO_OVERRIDE;
  if (override.ok) return override;
  ex.answerProblem(new ProblemError('bad-request', override.reason));
  return null;
}

/** How refusals of requests to `upstream` are written: its kind's format, or null (problem+json). */
function formatOf(upstream: CompiledUpstream): ProblemFormat | null {
  return kindFor(upstream.kind)?.problemFormat ?? null;
}
