/**
 * Route resolution, before anything else runs: requests that match no route are
 * answered 404 no-route here and never reach the proxy. Matching uses the policy
 * that is current when the request arrives, so reloads take effect for new requests.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { ProblemError } from '../errors.js';
import { splitRequestPath, type CompiledPolicy, type PolicyHolder } from '../policy/index.js';
import './context.js';
import { installProblemHandlers, missingHost, pathOf, sendProblem } from '../http/problems.js';
import { overridingMethod } from './headers.js';

/**
 * `?_method=PUT` (Rails, Laravel, Express's method-override) turns a request the gateway
 * routes by its real method (a GET: not fenced) into a write at the upstream. Refused,
 * also percent-encoded; unlike an override header it cannot be dropped without changing
 * the query the upstream would see.
 */
const METHOD_OVERRIDE_QUERY = /[?&](?:_|%5f)method(?:=|&|$|\[|%5b)/i;

const NO_OVERRIDE = { ok: true, method: null } as const;
const honouring = new WeakMap<CompiledPolicy, boolean>();

/** Whether any upstream of `policy` honours method-override headers (remembered per policy). */
function honoursOverrides(policy: CompiledPolicy): boolean {
  let honours = honouring.get(policy);
  if (honours === undefined) {
    honours = Object.values(policy.upstreams).some((u) => u.methodOverride === 'honour');
    honouring.set(policy, honours);
  }
  return honours;
}

export interface RoutingOptions {
  policy: PolicyHolder;
}

async function routing(app: FastifyInstance, opts: RoutingOptions): Promise<void> {
  app.decorateRequest('fencegate', null);
  installProblemHandlers(app, 'no-route');
  // Callback style (not async): no promise and no microtask per request. A refusal sends
  // the problem and does not call done(), which ends the hook chain.
  app.addHook('onRequest', (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const { headers } = request;
    // Node's parser already refuses this; kept so a lenient parser can never let a smuggling pair through.
    if (headers['content-length'] !== undefined && headers['transfer-encoding'] !== undefined) {
      reply.header('connection', 'close');
      sendProblem(
        reply,
        new ProblemError('bad-request', 'both Content-Length and Transfer-Encoding are set'),
      );
      return;
    }
    const noHost = missingHost(request);
    if (noHost !== null) {
      reply.header('connection', 'close');
      sendProblem(reply, noHost);
      return;
    }
    const url = request.raw.url ?? '/';
    const path = pathOf(url);
    const split = splitRequestPath(path);
    if (!split.ok) {
      sendProblem(reply, new ProblemError('bad-request', split.reason));
      return;
    }
    if (path.length < url.length && METHOD_OVERRIDE_QUERY.test(url.slice(path.length))) {
      sendProblem(
        reply,
        new ProblemError(
          'bad-request',
          'a "_method" query parameter would override the method at the upstream; send the real method',
        ),
      );
      return;
    }
    const policy = opts.policy.current;
    // An upstream that honours method-override headers applies the method they name: the
    // request is routed and fenced by it, and only then are the headers forwarded
    // (upstreamRequestHeaders). Anywhere else they are dropped and the real method rules.
    const override = honoursOverrides(policy) ? overridingMethod(request.raw.rawHeaders) : NO_OVERRIDE;
    if (!override.ok) {
      sendProblem(reply, new ProblemError('bad-request', override.reason));
      return;
    }
    if (override.method !== null) {
      const byOverride = policy.match(override.method, split.segments);
      if (byOverride !== null && byOverride.route.upstream.methodOverride === 'honour') {
        request.fencegate = { policy, match: byOverride, method: override.method, path, fence: null };
        done();
        return;
      }
    }
    const match = policy.match(request.method, split.segments);
    if (match === null) {
      sendProblem(reply, new ProblemError('no-route', `no route for ${request.method} ${path}`));
      return;
    }
    request.fencegate = { policy, match, method: request.method, path, fence: null };
    done();
  });
}

export const routingPlugin = fp(routing, { name: 'fencegate-routing', fastify: '5.x' });
