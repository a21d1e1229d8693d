/**
 * `fencegate init [DIR]`: scaffolds DIR/policies/ from the example policies the
 * package ships (policies/*.yaml, the annotated orders.yaml among them, and
 * policies/examples/ for the other downstream kinds), so the examples have one home.
 * Never overwrites: if any file it would write exists, it writes nothing.
 */
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pathExists } from './paths.js';

/** The package's policies/ directory (next to dist/ and src/ alike). */
export const EXAMPLE_POLICIES = fileURLToPath(new URL('../policies/', import.meta.url));

const POLICY_FILE = /\.ya?ml$/i;

export type InitResult =
  { ok: true; dir: string; written: string[] } | { ok: false; dir: string; existing: string[] };

/** The files to write: `from` (in the package) → `to` (relative to the policies directory). */
async function plan(): Promise<{ from: string; to: string }[]> {
  const files: { from: string; to: string }[] = [];
  for (const sub of ['', 'examples']) {
    const names = (await readdir(join(EXAMPLE_POLICIES, sub))).filter((n) => POLICY_FILE.test(n)).sort();
    for (const n of names) files.push({ from: join(EXAMPLE_POLICIES, sub, n), to: join(sub, n) });
  }
  return files;
}

/** Writes DIR/policies/…; refuses (writing nothing) when any of those files exists. */
export async function scaffold(dir: string): Promise<InitResult> {
  const target = join(dir, 'policies');
  const files = await plan();
  const existing: string[] = [];
  for (const f of files) if (await pathExists(join(target, f.to))) existing.push(join(target, f.to));
  if (existing.length > 0) return { ok: false, dir, existing };
  const written: string[] = [];
  for (const f of files) {
    const to = join(target, f.to);
    await mkdir(join(to, '..'), { recursive: true });
    // 'wx': a file created meanwhile is still not overwritten.
    await writeFile(to, await readFile(f.from), { flag: 'wx' });
    written.push(to);
  }
  return { ok: true, dir, written };
}

/** The CLI's text for a result: what was written and what to do next, or why nothing was. */
export function describeInit(result: InitResult): { stdout: string; stderr: string } {
  if (!result.ok) {
    return {
      stdout: '',
      stderr:
        `fencegate: init: not overwriting ${result.existing.join(', ')}; nothing was written ` +
        '(move them away, or run fencegate init in another directory)\n',
    };
  }
  const rel = (p: string) => relative(process.cwd(), p) || '.';
  const policies = rel(join(result.dir, 'policies'));
  const cd = rel(result.dir) === '.' ? '' : `  cd ${rel(result.dir)}\n`;
  return {
    stdout:
      result.written.map((p) => `created ${rel(p)}\n`).join('') +
      `
Next steps:
${cd}  npx fencegate check policies          # validate the policies (the examples pass)
  npx fencegate serve --sample 127.0.0.1:9000
      # runs the gateway (127.0.0.1:8080), the lock issuer (127.0.0.1:9090) on the embedded
      # store in ./.fencegate, and a sample "orders" service for the example routes
  curl -s -XPOST localhost:9090/v1/locks/order%3A42/acquire -H 'content-type: application/json' -d '{"owner":"me"}'
  curl -s -XPUT localhost:8080/orders/42 -H 'fencing-token: TOKEN' \\
      -H 'content-type: application/json' -d '{"status":"new"}'

Then edit ${policies}/orders.yaml for your own service (every setting is explained in it);
${policies}/examples/ has Postgres and S3 examples (not loaded: serve reads no subdirectories).
`,
    stderr: '',
  };
}
