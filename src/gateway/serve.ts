/**
 * Serving routed requests: one catch-all route whose handler hands each request, after
 * routing and the fence, to the runtime of its upstream's kind, with a pass-through body
 * parser (the body stays the request stream, read only by whoever forwards it).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { HTTP_METHODS, type PolicyHolder } from '../policy/index.js';
import { KINDS } from './kinds/index.js';
import type { KindEnvironment, KindRuntime, ResourceFence } from './kinds/types.js';

export interface ServeOptions {
  env: KindEnvironment;
  policy: PolicyHolder;
}

async function serve(app: FastifyInstance, opts: ServeOptions): Promise<void> {
  const runtimes = new Map<string, KindRuntime>();
  for (const [name, kind] of Object.entries(KINDS)) runtimes.set(name, kind.open(opts.env));
  for (const runtime of runtimes.values()) runtime.retain(opts.policy.current);
  const unsubscribe = opts.policy.subscribe((policy) => {
    for (const runtime of runtimes.values()) runtime.retain(policy);
  });
  app.addHook('onClose', async () => {
    unsubscribe();
    for (const runtime of runtimes.values()) await runtime.close();
  });

  function handler(request: FastifyRequest, reply: FastifyReply): unknown {
    const state = request.fencegate;
    if (state === null) throw new Error('request reached the handler without a route');
    const runtime = runtimes.get(state.match.route.upstream.kind);
    if (runtime === undefined) throw new Error(`no runtime for kind "${state.match.route.upstream.kind}"`);
    const fence = state.fence;
    const fences: ResourceFence[] =
      fence?.mode === 'resource' && fence.token !== null
        ? fence.locks.map((lock) => ({ lock, token: fence.token as bigint }))
        : [];
    return runtime.serve(request, reply, state, fences);
  }

  // No body is ever parsed: fastify's built-in text/plain parser would buffer (and cap) the
  // body before the preHandler runs. Every content type passes through as the stream.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_request, payload, done) => done(null, payload));
  for (const url of ['/', '/*']) app.route({ url, method: [...HTTP_METHODS], handler });
}

export const servePlugin = fp(serve, {
  name: 'fencegate-serve',
  fastify: '5.x',
  dependencies: ['fencegate-routing', 'fencegate-fence'],
});
