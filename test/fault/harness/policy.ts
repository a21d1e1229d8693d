/** Writes a policy YAML for a fault scenario into a temp directory. */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { tempDir } from '../../helpers/procs.js';

export interface UpstreamSpec {
  url: string;
  timeoutMs?: number;
  breaker?: {
    errorThresholdPercentage?: number;
    volumeThreshold?: number;
    resetTimeoutMs?: number;
    rollingWindowMs?: number;
  };
}

export interface RouteSpec {
  name: string;
  path: string;
  upstream: string;
  /** Lock template; omitted: the route is not fenced. */
  lock?: string;
  methods?: string[];
  check?: 'token' | 'lease' | 'sequencer';
  drainTimeoutMs?: number;
  /** false: shadow mode (the write is judged, counted and forwarded anyway). */
  enforce?: boolean;
}

export async function writePolicy(
  upstreams: Record<string, UpstreamSpec>,
  routes: RouteSpec[],
): Promise<{ dir: string; file: string }> {
  const lines = ['version: 1', 'upstreams:'];
  for (const [name, u] of Object.entries(upstreams)) {
    lines.push(`  ${name}:`, '    kind: http', `    url: ${JSON.stringify(u.url)}`);
    if (u.timeoutMs !== undefined) lines.push(`    timeoutMs: ${u.timeoutMs}`);
    if (u.breaker) {
      lines.push('    breaker:');
      for (const [k, v] of Object.entries(u.breaker)) if (v !== undefined) lines.push(`      ${k}: ${v}`);
    }
  }
  lines.push('routes:');
  for (const r of routes) {
    lines.push(
      `  - name: ${r.name}`,
      `    methods: [${(r.methods ?? ['PUT']).join(', ')}]`,
      `    path: ${JSON.stringify(r.path)}`,
      `    upstream: ${r.upstream}`,
    );
    if (r.lock !== undefined) {
      lines.push(`    lock: ${JSON.stringify(r.lock)}`, '    fencing:', `      check: ${r.check ?? 'token'}`);
      if (r.drainTimeoutMs !== undefined) lines.push(`      drainTimeoutMs: ${r.drainTimeoutMs}`);
      if (r.enforce !== undefined) lines.push(`      enforce: ${r.enforce}`);
    }
  }
  const dir = await tempDir('fg-fault-policy-');
  const file = join(dir, 'policy.yaml');
  await writeFile(file, `${lines.join('\n')}\n`);
  return { dir, file };
}

/** The sample upstream behind the gateway as in policies/orders.yaml, with fault-test timeouts. */
export function ordersPolicy(
  upstreamUrl: string,
  opts: { timeoutMs?: number; drainTimeoutMs?: number } = {},
) {
  return writePolicy({ orders: { url: upstreamUrl, timeoutMs: opts.timeoutMs ?? 3000 } }, [
    {
      name: 'order-writes',
      methods: ['POST', 'PUT', 'PATCH', 'DELETE'],
      path: '/orders/:orderId',
      upstream: 'orders',
      lock: 'order:{orderId}',
      drainTimeoutMs: opts.drainTimeoutMs ?? 3000,
    },
  ]);
}
