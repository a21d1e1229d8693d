/**
 * fencegate as a user installs it: the packed tarball (built dist/, as `npm test`
 * builds it first) installed as a dependency of an empty project with the registry's
 * production dependencies only, then `npx fencegate init` and `npx fencegate serve`
 * there, on the embedded store, with the scaffolded policies.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { access, mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, freePort, tempDir } from '../helpers/procs.js';
import { sleep } from '../helpers/wait.js';

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment without npm's own variables (set when this runs under `npm test`). */
function cleanEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
}

async function run(cmd: string, args: string[], cwd: string, timeoutMs: number): Promise<Ran> {
  const proc = spawn(cmd, args, { cwd, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const [code] = (await once(proc, 'exit')) as [number | null];
  clearTimeout(timer);
  return { code, stdout, stderr };
}

function ok(r: Ran, what: string): Ran {
  if (r.code !== 0) throw new Error(`${what} exited ${r.code}:\n${r.stdout}\n${r.stderr}`);
  return r;
}

let work: string;
let tarball: string;
let entries: string[];
let project: string;

beforeAll(async () => {
  work = await tempDir('fg-pack-');
  const packed = ok(
    await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], ROOT, 120_000),
    'npm pack',
  );
  const [info] = JSON.parse(packed.stdout) as [{ filename: string }];
  tarball = join(work, info.filename);
  entries = ok(await run('tar', ['-tzf', tarball], work, 60_000), 'tar')
    .stdout.trim()
    .split('\n');
  project = join(work, 'app');
  await mkdir(project);
  await writeFile(join(project, 'package.json'), '{ "name": "app", "private": true }\n');
  ok(
    await run('npm', ['install', '--no-audit', '--no-fund', tarball], project, 300_000),
    'npm install <tarball>',
  );
}, 420_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe('the packed package', () => {
  it('ships the build, the CLI and the example policies, and no tests or TypeScript sources', () => {
    const files = entries.map((e) => e.replace(/^package\//, ''));
    for (const f of ['package.json', 'README.md', 'bin/fencegate.js', 'dist/cli.js', 'dist/index.js'])
      expect(files).toContain(f);
    expect(files).toContain('dist/index.d.ts');
    expect(files).toContain('policies/orders.yaml');
    expect(files).toContain('policies/examples/postgres.yaml');
    expect(files.filter((f) => f.startsWith('test/'))).toEqual([]);
    expect(files.filter((f) => f.startsWith('src/'))).toEqual([]);
    expect(files.filter((f) => /\.ts$/.test(f) && !f.endsWith('.d.ts'))).toEqual([]);
    expect(files.filter((f) => f.endsWith('.map'))).toEqual([]);
    // The runtime assets copied next to the compiled code (Lua, SQL) come along.
    expect(files.some((f) => f.startsWith('dist/') && f.endsWith('.lua'))).toBe(true);
  });

  it('installs without its development dependencies (no build step runs on install)', async () => {
    const installed = await readdir(join(project, 'node_modules'));
    expect(installed).toContain('fencegate');
    for (const dev of ['typescript', 'vitest', 'eslint', 'kubernetes-models'])
      expect(installed, dev).not.toContain(dev);
    await access(join(project, 'node_modules', '.bin', 'fencegate'));
  });

  it('runs npx fencegate init and npx fencegate serve in the new project', async () => {
    const init = ok(await run('npx', ['--no-install', 'fencegate', 'init'], project, 60_000), 'init');
    expect(init.stdout).toContain('created policies/orders.yaml');
    const check = ok(
      await run('npx', ['--no-install', 'fencegate', 'check', 'policies'], project, 60_000),
      'check',
    );
    expect(check.stdout).toMatch(/policies: ok \(5 routes\)/);

    // The scaffolded route follows the sample service (${FENCEGATE_SAMPLE:-…} in its url):
    // --sample on a free port moves both, the policy unedited.
    const port = await freePort();
    const proc = spawn(
      'npx',
      ['--no-install', 'fencegate', 'serve', '--listen', '127.0.0.1:0', '--control', '127.0.0.1:0'].concat([
        '--sample',
        `127.0.0.1:${port}`,
      ]),
      // Its own process group: stopping it signals npx and the fencegate process under it.
      { cwd: project, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'], detached: true },
    );
    let out = '';
    proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
    // 'close': every process holding its output (npx and fencegate under it) is done.
    const closed = once(proc, 'close');
    const pid = proc.pid as number;
    try {
      const end = Date.now() + 180_000;
      let m: RegExpExecArray | null;
      while (!(m = /listening data=([^\s"]+) control=([^\s"]+)/.exec(out))) {
        if (proc.exitCode !== null) throw new Error(`serve exited ${proc.exitCode}: ${out}`);
        if (Date.now() > end) throw new Error(`serve did not start: ${out}`);
        await sleep(50);
      }
      const [, data, control] = m as unknown as [string, string, string];
      expect(out).toMatch(/store embedded \.\/\.fencegate/);
      expect((await fetch(`${control}/healthz`)).status).toBe(200);

      const put = (token?: string) =>
        fetch(`${data}/orders/42`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json', ...(token ? { 'fencing-token': token } : {}) },
          body: '{"status":"new"}',
        });
      const refused = await put();
      expect(refused.status).toBe(428);
      expect(((await refused.json()) as { type: string }).type).toBe('urn:fencegate:token-required');
      const acquired = await fetch(`${control}/v1/locks/order%3A42/acquire`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"owner":"newcomer"}',
      });
      expect(acquired.status).toBe(200);
      const { token } = (await acquired.json()) as { token: string };
      const admitted = await put(token);
      expect(admitted.status).toBeLessThan(300);
      await admitted.body?.cancel();
      expect(await (await fetch(`${data}/orders/42`)).json()).toMatchObject({ body: { status: 'new' } });
    } finally {
      process.kill(-pid, 'SIGTERM');
      await closed;
    }
    expect(out).toContain('SIGTERM: shutting down');
  }, 300_000);
});
