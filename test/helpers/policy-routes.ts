/** Policy files made of route lines, over one http upstream `up`, loaded as `fencegate serve` would. */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { formatPolicyError, loadPolicies } from '../../src/policies.js';

const HEAD = [
  'version: 1',
  'upstreams:',
  '  up:',
  '    kind: http',
  '    url: http://127.0.0.1:1',
  'routes:',
];

/** Route lines start at line 7 of the file. `errors` are formatted (file:line:col: field: message). */
export async function loadRoutes(routeLines: string[]) {
  const file = join(await mkdtemp(join(tmpdir(), 'fg-routes-')), 'p.yaml');
  await writeFile(file, [...HEAD, ...routeLines].join('\n') + '\n');
  const result = await loadPolicies(file);
  return { file, result, errors: result.ok ? [] : result.errors.map(formatPolicyError) };
}
