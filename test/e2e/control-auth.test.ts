/**
 * Authentication as a user deploys it, with the built CLI: `fencegate auth hash`, an
 * auth file given by flag, the probe listener (--health) without credentials, the
 * client SDK with an apiKey, a reload on SIGHUP, located errors for a bad auth file,
 * and the secure default (no non-loopback control listener without --auth unless
 * --insecure, which is then warned about).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseKeyHash, verifyApiKey } from '../../src/auth/keys.js';
import { FencegateClient } from '../../src/client/index.js';
import { BIN, ROOT, runCli, startFencegate, tempDir, type FencegateProcess } from '../helpers/procs.js';
import { waitUntil } from '../helpers/wait.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

function redisStore(): string[] {
  const ns = `fgauth${process.pid}${Math.random().toString(36).slice(2, 8)}`;
  return ['--store', 'redis://127.0.0.1:6379', '--store-namespace', ns, '--allow-volatile-redis'];
}
const policies = ['--policies', 'test/fixtures/empty-policy.yaml'];

async function serve(args: string[], env: NodeJS.ProcessEnv = {}): Promise<FencegateProcess> {
  const s = await startFencegate([...redisStore(), ...policies, ...args], env);
  cleanups.push(() => s.kill());
  return s;
}

async function newKey(): Promise<{ key: string; hash: string }> {
  const r = await runCli(['auth', 'hash']);
  expect(r.code).toBe(0);
  const key = /^key: +(\S+)$/m.exec(r.stdout)?.[1];
  const hash = /^hash: +(\S+)$/m.exec(r.stdout)?.[1];
  if (key === undefined || hash === undefined) throw new Error(`unexpected output: ${r.stdout}`);
  return { key, hash };
}

async function authFile(text: string): Promise<string> {
  const dir = await tempDir('fg-auth-');
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'auth.yaml');
  await writeFile(file, text);
  return file;
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

describe('fencegate auth hash', () => {
  it('makes a key and its hash, which verify', async () => {
    const { key, hash } = await newKey();
    expect(key).toMatch(/^fgk_[A-Za-z0-9_-]{65}$/);
    const parsed = parseKeyHash(hash);
    if (typeof parsed === 'string') throw new Error(parsed);
    expect(await verifyApiKey(key, parsed)).toBe(true);
  });

  it('hashes a key read from stdin, and refuses a short one', async () => {
    const run = async (input: string) => {
      const proc = spawn(process.execPath, [BIN, 'auth', 'hash', '-'], { cwd: ROOT });
      let stdout = '';
      let stderr = '';
      proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      proc.stdin.end(input);
      const [code] = (await once(proc, 'exit')) as [number];
      return { code, stdout, stderr };
    };
    const key = 'op.an-operator-chosen-key-with-enough-entropy';
    const ok = await run(`${key}\n`);
    expect(ok.code).toBe(0);
    const parsed = parseKeyHash(ok.stdout.trim());
    if (typeof parsed === 'string') throw new Error(parsed);
    expect(await verifyApiKey(key, parsed)).toBe(true);
    const short = await run('op.short\n');
    expect(short.code).toBe(2);
    expect(short.stderr).toMatch(
      /^fencegate: an API key's secret \(after "op\."\) must have at least 24 characters\n$/,
    );
    const noId = await run('an-operator-chosen-key-with-enough-entropy\n');
    expect(noId.code).toBe(2);
    expect(noId.stderr).toMatch(/must be "<id>\.<secret>"/);
  });

  it('is in --help, with the serve flags', async () => {
    const help = await runCli(['--help']);
    for (const text of [
      'fencegate auth hash',
      '--auth FILE',
      'FENCEGATE_AUTH',
      '--health HOST:PORT',
      '--insecure',
    ])
      expect(help.stdout).toContain(text);
  });
});

describe('serve with an auth file', () => {
  it('needs a key on the control listener; the probe listener needs none; the SDK sends its apiKey', async () => {
    const worker = await newKey();
    const file = await authFile(`principals:
  - name: worker
    keys: ['${worker.hash}']
    grants: [{ verbs: [lease, read], prefix: 'jobs/' }]
public: []
`);
    // Non-loopback control is fine with an auth file.
    const s = await serve(['--auth', file, '--control', '0.0.0.0:0', '--health', '127.0.0.1:0']);
    const control = s.control.replace('0.0.0.0', '127.0.0.1');
    const health = /listening .* health=(\S+?)["\s]/.exec(s.output())?.[1];
    expect(health).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);

    for (const path of ['/healthz', '/readyz', '/metrics']) {
      expect((await fetch(`${health}${path}`)).status, path).toBe(200);
      expect((await fetch(`${control}${path}`)).status, path).toBe(401);
    }
    expect((await fetch(`${health}/v1/locks`)).status).toBe(404); // probes only
    expect((await fetch(`${control}/v1/locks`)).status).toBe(401);
    expect((await fetch(`${control}/v1/locks`, { headers: bearer(worker.key) })).status).toBe(200);

    const anonymous = new FencegateClient({ url: control });
    await expect(anonymous.acquire('jobs/1', { owner: 'w' })).rejects.toMatchObject({ status: 401 });
    const fg = new FencegateClient({ url: control, apiKey: worker.key });
    const lock = await fg.acquire('jobs/1', { owner: 'w', ttlMs: 2000, autoRenew: false });
    expect(lock.owner).toBe('@worker/w');
    await lock.renew();
    expect(await fg.inspect('jobs/1')).toMatchObject({ held: true, owner: '@worker/w' });
    expect(await lock.release()).toBe(true);
    await expect(fg.acquire('other/1', { owner: 'w' })).rejects.toMatchObject({ status: 403 });
  }, 180_000);

  it('reloads the auth file on SIGHUP; a broken one keeps the last good file in force', async () => {
    const first = await newKey();
    const second = await newKey();
    const grants = "grants: [{ verbs: [read], prefix: '*' }]";
    const file = await authFile(`principals:\n  - { name: a, keys: ['${first.hash}'], ${grants} }\n`);
    const s = await serve(['--auth', file]);
    const locks = (key: string) => fetch(`${s.control}/v1/locks`, { headers: bearer(key) });
    expect((await locks(first.key)).status).toBe(200);
    expect((await locks(second.key)).status).toBe(401);

    await writeFile(file, `principals:\n  - { name: b, keys: ['${second.hash}'], ${grants} }\n`);
    s.proc.kill('SIGHUP');
    await waitFor(async () => (await locks(second.key)).status === 200, 'the new key works');
    expect((await locks(first.key)).status).toBe(401); // revoked

    await writeFile(file, 'principals: [\n');
    s.proc.kill('SIGHUP');
    await waitFor(async () => /auth file reload failed/.test(s.output()), 'the failed reload logged');
    expect((await locks(second.key)).status).toBe(200);
  }, 180_000);

  it('refuses to start on a bad auth file, naming file, line and field', async () => {
    const file = await authFile(`principals:
  - name: a
    keys: ['plaintext-key']
    grants: []
`);
    const r = await runCli(['serve', ...redisStore(), ...policies, '--auth', file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${file}:3:12: principals[0].keys[0]: must be "scrypt$N$r$p$salt$hash"`);
    const missing = await runCli(['serve', ...policies, '--auth', `${file}.nope`]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain(`${file}.nope: cannot read the auth file (ENOENT)`);
  });
});

describe('secure by default', () => {
  it('refuses a non-loopback control listener without --auth, in one line that says why and what to do', async () => {
    for (const [args, env] of [
      [['--control', '0.0.0.0:0'], {}],
      [[], { FENCEGATE_CONTROL: '[::]:0' }],
    ] as [string[], NodeJS.ProcessEnv][]) {
      const r = await runCli(['serve', ...policies, ...args], env);
      expect(r.code).toBe(2);
      const lines = r.stderr.trimEnd().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(
        /^fencegate: refusing to serve the control listener on (0\.0\.0\.0|\[::\]):0 without authentication: .*take any lock.*--auth FILE.*--insecure/,
      );
    }
  });

  it('serves it with --insecure, and warns at start', async () => {
    const s = await serve(['--control', '0.0.0.0:0', '--insecure']);
    const warning = s.logs().find((l) => l.insecure === true);
    expect(warning?.level).toBe(40);
    expect(warning?.msg).toMatch(/takes no credentials; anyone who reaches it can take any lock/);
    const control = s.control.replace('0.0.0.0', '127.0.0.1');
    expect((await fetch(`${control}/v1/locks`)).status).toBe(200);
  }, 180_000);
});

const waitFor = (cond: () => Promise<boolean>, what: string, ms = 20_000): Promise<void> =>
  waitUntil(what, cond, { timeoutMs: ms, everyMs: 100, message: `timed out waiting for: ${what}` });
