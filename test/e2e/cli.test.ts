/**
 * The built CLI as a user runs it: help, version, bad flags, an unreachable store,
 * health and readiness, environment variables, and a clean SIGTERM.
 */
import { readdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  freePort,
  runCli,
  startFencegate,
  startRedis,
  tempDir,
  type FencegateProcess,
} from '../helpers/procs.js';
import { sleep } from '../helpers/wait.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

async function serve(args: string[], env: NodeJS.ProcessEnv = {}): Promise<FencegateProcess> {
  const dir = await tempDir('fg-cli-');
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  const s = await startFencegate(['--store', dir, ...args], env);
  cleanups.push(() => s.kill());
  return s;
}

const policies = ['--policies', 'test/fixtures/empty-policy.yaml'];

/** The shared (volatile) Redis under a namespace of its own: starts in a moment. */
function redisStore(): string[] {
  const ns = `fgcli${process.pid}${Math.random().toString(36).slice(2, 8)}`;
  return ['--store', 'redis://127.0.0.1:6379', '--store-namespace', ns, '--allow-volatile-redis'];
}

function acquireBody(): RequestInit {
  return {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ owner: 'cli-test', ttlMs: 1000 }),
  };
}

describe('fencegate CLI', () => {
  it('prints help and version', async () => {
    const help = await runCli(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('fencegate serve');
    expect(help.stdout).toContain('FENCEGATE_STORE');
    for (const flag of ['--log-level', '--log-format json|pretty', '--access-log on|off|FRACTION'])
      expect(help.stdout).toContain(flag);
    const v = await runCli(['--version']);
    expect(v.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it.each([
    [['serve', '--bogus'], /bogus/],
    [['serve', '--listen', 'nowhere'], /--listen: "nowhere" is not HOST:PORT/],
    [['serve', '--control', '127.0.0.1:99999'], /--control/],
    [['frobnicate'], /unknown command "frobnicate"/],
    [['serve', 'extra'], /no arguments/],
    [
      ['serve', '--log-level', 'verbose'],
      /^fencegate: --log-level: "verbose" must be one of fatal\|error\|warn\|info\|debug\|trace\|silent$/m,
    ],
    [['serve', '--log-format', 'xml'], /--log-format: "xml" must be one of json\|pretty/],
    [['serve', '--access-log', '2'], /--access-log: "2" must be on, off, or a fraction between 0 and 1/],
  ])('refuses %j with a one-line error', async (args, message) => {
    const r = await runCli(args);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(message);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });

  it.each([
    ['serve', 'etcdv3://127.0.0.1:2379'],
    ['serve', 'redis+sentinel://127.0.0.1:26379'],
    ['serve', 'reddis://127.0.0.1:6379'],
    ['serve', 'file:./data'],
    ['epoch', 'postgress://127.0.0.1/test'],
  ])('%s refuses the unknown store scheme of %s and creates nothing', async (command, store) => {
    const cwd = await tempDir('fg-scheme-');
    cleanups.push(() => rm(cwd, { recursive: true, force: true }));
    const args = command === 'epoch' ? ['epoch', 'bump', '--store', store] : ['serve', '--store', store];
    const r = await runCli(args, {}, cwd);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/--store: .*unknown store scheme/);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(await readdir(cwd)).toEqual([]); // no directory named after the URL
    const env = await runCli(['serve'], { FENCEGATE_STORE: store }, cwd);
    expect(env.code).not.toBe(0);
    expect(env.stderr).toMatch(/FENCEGATE_STORE: .*unknown store scheme/);
    expect(await readdir(cwd)).toEqual([]);
  });

  it('names a bad environment variable', async () => {
    const r = await runCli(['serve'], { FENCEGATE_LISTEN: 'bad' });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/FENCEGATE_LISTEN/);
    const level = await runCli(['serve'], { FENCEGATE_LOG_LEVEL: 'loud' });
    expect(level.code).toBe(2);
    expect(level.stderr.trim()).toBe(
      'fencegate: environment FENCEGATE_LOG_LEVEL: "loud" must be one of fatal|error|warn|info|debug|trace|silent',
    );
  });

  it('names the config file line of a bad log level', async () => {
    const dir = await tempDir('fg-cfg-');
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    await writeFile(join(dir, 'fencegate.yaml'), 'listen: 127.0.0.1:0\nlogLevel: chatty\n');
    const r = await runCli(['serve', '--config', join(dir, 'fencegate.yaml')]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe(
      `fencegate: ${join(dir, 'fencegate.yaml')}:2:1: logLevel: "chatty" must be one of fatal|error|warn|info|debug|trace|silent`,
    );
  });

  it('prints only JSON log lines: lifecycle, access log per listener, no probes at info', async () => {
    const s = await startFencegate([
      ...redisStore(),
      ...policies,
      '--log-level',
      'info',
      '--log-format',
      'json',
    ]);
    cleanups.push(() => s.kill());
    expect((await fetch(`${s.control}/healthz`)).status).toBe(200);
    expect((await fetch(`${s.control}/metrics`)).status).toBe(200);
    expect((await fetch(`${s.control}/v1/locks/cli-log/acquire`, acquireBody())).status).toBe(200);
    expect((await fetch(`${s.data}/nowhere?q=1`)).status).toBe(404);
    expect(await s.stop()).toBe(0);

    const text = s.output().trim();
    const lines = text.split('\n');
    const logs = s.logs();
    expect(logs).toHaveLength(lines.length); // every line is a JSON object
    const msgs = logs.map((l) => l.msg);
    expect(msgs).toContainEqual(expect.stringMatching(/^listening data=http:\/\/127\.0\.0\.1:\d+ control=/));
    expect(msgs).toContain('SIGTERM: shutting down');
    expect(msgs.at(-1)).toBe('stopped');
    const requests = logs.filter((l) => l.msg === 'request');
    expect(requests.map((l) => [l.listener, l.method, l.path, l.status])).toEqual([
      ['control', 'POST', '/v1/locks/cli-log/acquire', 200],
      ['data', 'GET', '/nowhere', 404],
    ]);
    expect(requests[1]).toMatchObject({ route: null, level: 30 });
    expect(text).not.toMatch(/healthz|"\/metrics"/);
  });

  it('--log-format pretty prints readable lines, the listening line included', async () => {
    const s = await startFencegate([...redisStore(), ...policies, '--log-format', 'pretty']);
    cleanups.push(() => s.kill());
    expect(await s.stop()).toBe(0);
    expect(s.logs()).toEqual([]);
    expect(s.output()).toMatch(/INFO.*listening data=http:\/\/127\.0\.0\.1:\d+ control=http/);
    expect(s.output()).toMatch(/INFO.*SIGTERM: shutting down/);
  });

  it('fails with one line when the store is unreachable', async () => {
    const port = await freePort();
    const r = await runCli([
      'serve',
      '--store',
      `redis://127.0.0.1:${port}`,
      ...policies,
      '--control',
      '127.0.0.1:0',
      '--listen',
      '127.0.0.1:0',
    ]);
    expect(r.code).not.toBe(0);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/redis/i);
    const pg = await runCli([
      'serve',
      '--store',
      `postgres://postgres@127.0.0.1:${port}/x`,
      ...policies,
      '--control',
      '127.0.0.1:0',
      '--listen',
      '127.0.0.1:0',
    ]);
    expect(pg.code).not.toBe(0);
    expect(pg.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('serves health and readiness on the embedded store and exits cleanly on SIGTERM', async () => {
    const s = await serve(policies);
    expect((await fetch(`${s.control}/healthz`)).status).toBe(200);
    const ready = await fetch(`${s.control}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ ok: true, store: { kind: 'embedded' } });
    expect(await s.stop()).toBe(0);
    expect(s.output()).toContain('SIGTERM');
  });

  it('takes its settings from the environment', async () => {
    const port = await freePort();
    const s = await serve(['--control', `127.0.0.1:${port}`], {
      FENCEGATE_POLICIES: 'test/fixtures/empty-policy.yaml',
    });
    expect(s.control).toBe(`http://127.0.0.1:${port}`);
  });

  it('readyz fails while the store is unreachable and recovers', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.stop());
    const s = await startFencegate(['--store', redis.url, '--allow-volatile-redis', ...policies]);
    cleanups.push(() => s.kill());
    expect((await fetch(`${s.control}/readyz`)).status).toBe(200);
    await redis.kill();
    const down = await fetch(`${s.control}/readyz`);
    expect(down.status).toBe(503);
    expect((await fetch(`${s.control}/healthz`)).status).toBe(200);
    const acquire = await fetch(`${s.control}/v1/locks/x/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"owner":"a"}',
    });
    expect(acquire.status).toBe(503);
    expect(((await acquire.json()) as { type: string }).type).toBe('urn:fencegate:store-unavailable');
    await redis.restart();
    const end = Date.now() + 15_000;
    let status = 0;
    while (Date.now() < end && status !== 200) {
      status = (await fetch(`${s.control}/readyz`)).status;
      if (status !== 200) await sleep(200);
    }
    expect(status).toBe(200);
  }, 40_000);

  it('--store-reset-timeout-ms sets how long fenced writes are refused once the store circuit opens', async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.stop());
    const s = await startFencegate([
      '--store',
      redis.url,
      '--allow-volatile-redis',
      '--policies',
      'policies/orders.yaml',
      '--store-timeout-ms',
      '500',
      '--store-reset-timeout-ms',
      '30000',
    ]);
    cleanups.push(() => s.kill());
    await redis.kill();
    // Failing admissions open the circuit (at least 5 calls, more than half failed); then
    // every fenced write is refused at once with Retry-After counting down from 30 s.
    let retryAfter = 0;
    for (let i = 0; i < 20 && retryAfter <= 5; i++) {
      const res = await fetch(`${s.data}/orders/7`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', 'fencing-token': '1' },
        body: '{}',
      });
      expect(res.status).toBe(503);
      expect(((await res.json()) as { type: string }).type).toBe('urn:fencegate:fence-unavailable');
      retryAfter = Number(res.headers.get('retry-after'));
    }
    expect(retryAfter).toBeGreaterThan(5); // the default reset timeout is 5 s
    expect(retryAfter).toBeLessThanOrEqual(30);
  }, 40_000);
});
