/**
 * `kind: http`: any REST service behind a reverse proxy. A request on a fenced route
 * writes the route's one lock (rendered from the path and headers); the fence is
 * checked in the lock store and ordered by the drain barrier; the request is forwarded
 * over undici (../../forward.ts).
 */
import { ProblemError } from '../../../errors.js';
import { renderLock } from '../../../policy/template.js';
import { forwardHttp } from '../../forward.js';
import { headerLookup } from '../../headers.js';
import type { DownstreamKind, WriteSet } from '../types.js';
import { compileHttpUpstream } from './compile.js';

export const httpKind: DownstreamKind = {
  name: 'http',
  fenceAt: 'gateway',
  upstreamFields: {},
  routeFields: {},
  compileUpstream: compileHttpUpstream,
  compileRoute: () => ({ ok: true, target: {} }),
  replayable: true,
  writes(route, req): WriteSet {
    if (route.lock === null) return { kind: 'read' };
    const rendered = renderLock(route.lock, req.params, headerLookup(req.rawHeaders));
    if (!rendered.ok) {
      const detail = `cannot derive the lock for route "${route.name}": ${rendered.reason}`;
      return { kind: 'refuse', problem: new ProblemError('invalid-key', detail) };
    }
    return { kind: 'write', locks: [rendered.key] };
  },
  open(env) {
    return {
      serve: (ex, state) => forwardHttp(ex, state, env, {}),
      // The shared pool follows the policy itself (../../gateway-server.ts); this only shows its breakers.
      retain: (policy) => env.pool.seed(policy, 'http'),
      close: async () => undefined,
    };
  },
};
