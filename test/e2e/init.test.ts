/**
 * A first run: `fencegate init` scaffolds policies/ (valid, never overwriting), and
 * `fencegate serve` where there is no ./policies runs the issuer with no routes,
 * picking the policies up on SIGHUP once they exist.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ROOT, runCli, startFencegate, tempDir } from '../helpers/procs.js';
import { waitUntil } from '../helpers/wait.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function emptyDir(): Promise<string> {
  const dir = await tempDir('fg-init-');
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** The shared Redis, under a namespace of this test's own (nothing else is touched). */
const redisStore = () => ['--store', 'redis://127.0.0.1:6379', '--allow-volatile-redis'];
const namespace = () => ['--store-namespace', `fginit${randomBytes(4).toString('hex')}`];

const until = (check: () => Promise<boolean>, what: string, ms = 15_000): Promise<void> =>
  waitUntil(what, check, { timeoutMs: ms, everyMs: 100 });

describe('fencegate init', () => {
  it('scaffolds the example policies, which pass fencegate check', async () => {
    const dir = await emptyDir();
    const r = await runCli(['init'], {}, dir);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('created policies/orders.yaml');
    expect(r.stdout).toMatch(/Next steps:[\s\S]*fencegate serve/);
    expect((await readdir(join(dir, 'policies'))).sort()).toEqual(['examples', 'orders.yaml', 'shadow.yaml']);
    expect((await readdir(join(dir, 'policies', 'examples'))).sort()).toEqual(['postgres.yaml', 's3.yaml']);
    // The copies are the package's examples, byte for byte (one home: policies/ in the repository).
    expect(await readFile(join(dir, 'policies', 'orders.yaml'), 'utf8')).toBe(
      await readFile(join(ROOT, 'policies', 'orders.yaml'), 'utf8'),
    );
    const check = await runCli(['check', 'policies'], {}, dir);
    expect(check.stderr).toBe('');
    expect(check.code).toBe(0);
    const examples = await runCli(['check', 'policies/examples/s3.yaml'], {}, dir);
    expect(examples.code).toBe(0);
  });

  it('explains every policy setting in the scaffolded route file', async () => {
    const text = await readFile(join(ROOT, 'policies', 'orders.yaml'), 'utf8');
    const settings = [
      'version',
      'kind',
      'url',
      'timeoutMs',
      'errorThresholdPercentage',
      'volumeThreshold',
      'resetTimeoutMs',
      'rollingWindowMs',
      'name',
      'methods',
      'path',
      'upstream',
      'lock',
      'check',
      'enforce',
      'drainTimeoutMs',
      'idleTimeoutMs',
    ];
    for (const s of settings)
      expect(text, s).toMatch(new RegExp(`^\\s*(- )?${s}:.*#|#.*\\n\\s*(- )?${s}:`, 'm'));
  });

  it('writes into DIR when given one, creating it', async () => {
    const dir = join(await emptyDir(), 'new', 'project');
    const r = await runCli(['init', dir]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`cd `);
    expect(await readdir(join(dir, 'policies'))).toContain('orders.yaml');
  });

  it('refuses to overwrite any existing file and then writes nothing', async () => {
    const dir = await emptyDir();
    await mkdir(join(dir, 'policies'));
    await writeFile(join(dir, 'policies', 'shadow.yaml'), 'mine\n');
    const r = await runCli(['init', dir]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/not overwriting .*policies\/shadow\.yaml; nothing was written/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(await readdir(join(dir, 'policies'))).toEqual(['shadow.yaml']);
    expect(await readFile(join(dir, 'policies', 'shadow.yaml'), 'utf8')).toBe('mine\n');
  });

  it('is in the help', async () => {
    expect((await runCli(['--help'])).stdout).toMatch(/fencegate init \[DIR\]/);
  });

  it('takes at most one directory', async () => {
    const r = await runCli(['init', 'a', 'b']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/usage: fencegate init \[DIR\]/);
  });
});

describe('fencegate serve without policies', () => {
  it('runs the issuer, proxies nothing, and loads ./policies on SIGHUP once it exists', async () => {
    const dir = await emptyDir();
    const s = await startFencegate(
      [...redisStore(), ...namespace(), '--log-level', 'info'],
      {},
      120_000,
      dir,
    );
    cleanups.push(() => s.kill());
    expect(s.output()).toMatch(/no policies: \.\/policies does not exist, so no routes are proxied/);
    expect((await fetch(`${s.control}/healthz`)).status).toBe(200);
    const acquire = await fetch(`${s.control}/v1/locks/order%3A1/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"owner":"a"}',
    });
    expect(acquire.status).toBe(200);
    const none = await fetch(`${s.data}/orders/1`, { method: 'PUT', body: '{}' });
    expect(none.status).toBe(404);
    expect(none.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(((await none.json()) as { type: string }).type).toBe('urn:fencegate:no-route');

    expect((await runCli(['init'], {}, dir)).code).toBe(0);
    s.proc.kill('SIGHUP');
    await until(() => Promise.resolve(/policies reloaded \(5 routes\)/.test(s.output())), 'the reload');
    const fenced = await fetch(`${s.data}/orders/1`, { method: 'PUT', body: '{}' });
    expect(fenced.status).toBe(428); // the scaffolded route: a fenced write without a token
    await fenced.body?.cancel();

    // From then on the directory is watched like any policy directory.
    const orders = join(dir, 'policies', 'orders.yaml');
    await writeFile(orders, (await readFile(orders, 'utf8')).replace('path: /_writes', 'path: /_history'));
    await until(async () => {
      const res = await fetch(`${s.data}/_writes`);
      await res.body?.cancel();
      return res.status === 404;
    }, 'the watcher to reload the edited file');
    expect(await s.stop()).toBe(0);
  }, 60_000);

  it('still refuses a --policies path that does not exist', async () => {
    const dir = await emptyDir();
    const flag = await runCli(['serve', ...redisStore(), '--policies', 'missing'], {}, dir);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toBe(
      'fencegate: invalid policies: missing: cannot read: no such file or directory\n',
    );
    const env = await runCli(['serve', ...redisStore()], { FENCEGATE_POLICIES: 'gone/x.yaml' }, dir);
    expect(env.code).toBe(2);
    expect(env.stderr).toMatch(/invalid policies: gone\/x\.yaml: cannot read/);
  });
});
