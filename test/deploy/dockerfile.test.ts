/**
 * deploy/Dockerfile, checked without a Docker daemon: its instructions are parsed
 * and the runtime stage must be small and safe (production dependencies only, from
 * the packed tarball; a non-root user; `fencegate serve` as entrypoint; listeners on
 * all interfaces); the build stage must copy everything the tarball is made of; and
 * the HEALTHCHECK command is run against a real fencegate, up and down.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, freePort, startFencegate, type FencegateProcess } from '../helpers/procs.js';

interface Instruction {
  op: string;
  args: string;
}

/** Instructions, with line continuations joined and comments dropped, split into stages at FROM. */
function parseDockerfile(text: string): Instruction[][] {
  const logical = text
    .split('\n')
    .filter((l) => !/^\s*#/.test(l))
    .join('\n')
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0);
  const stages: Instruction[][] = [];
  for (const line of logical) {
    const m = /^(\w+)\s+(.*)$/.exec(line);
    if (!m) throw new Error(`cannot parse: ${line}`);
    const ins = { op: (m[1] as string).toUpperCase(), args: (m[2] as string).replace(/\s+/g, ' ') };
    if (ins.op === 'FROM') stages.push([]);
    stages[stages.length - 1]?.push(ins);
  }
  return stages;
}

const all = (stage: Instruction[], op: string) => stage.filter((i) => i.op === op).map((i) => i.args);

let stages: Instruction[][];
let runtime: Instruction[];
let build: Instruction[];

beforeAll(async () => {
  stages = parseDockerfile(await readFile(join(ROOT, 'deploy', 'Dockerfile'), 'utf8'));
  build = stages[0] as Instruction[];
  runtime = stages[stages.length - 1] as Instruction[];
});

describe('deploy/Dockerfile', () => {
  it('is multi-stage, with a slim Node 20 runtime', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2);
    expect(all(runtime, 'FROM')[0]).toMatch(/^node:20-(slim|alpine)\b/);
  });

  it('runs as a non-root user', () => {
    const users = all(runtime, 'USER');
    expect(users.length).toBeGreaterThan(0);
    const user = (users[users.length - 1] as string).split(':')[0];
    expect(user).not.toMatch(/^(root|0)$/);
  });

  it('runs fencegate serve, listening on all interfaces (data 8080, control 9090, probes 9091)', () => {
    expect(JSON.parse(all(runtime, 'ENTRYPOINT')[0] as string)).toEqual(['fencegate', 'serve']);
    const env = all(runtime, 'ENV').join(' ');
    expect(env).toContain('FENCEGATE_LISTEN=0.0.0.0:8080');
    expect(env).toContain('FENCEGATE_CONTROL=0.0.0.0:9090');
    expect(env).toContain('FENCEGATE_HEALTH=0.0.0.0:9091');
    // Secure by default: the image does not turn authentication off; the deployment
    // gives FENCEGATE_AUTH (or, knowingly, FENCEGATE_INSECURE).
    expect(env).not.toMatch(/FENCEGATE_INSECURE|FENCEGATE_AUTH/);
    expect(all(runtime, 'EXPOSE').join(' ').split(' ').sort()).toEqual(['8080', '9090', '9091']);
  });

  it('installs the packed tarball with production dependencies only', () => {
    const copies = all(runtime, 'COPY');
    expect(copies).toEqual(['--from=build /tmp/fencegate.tgz /tmp/fencegate.tgz']);
    const runs = all(runtime, 'RUN').join(' && ');
    expect(runs).toMatch(/npm install --global --omit=dev .*\/tmp\/fencegate\.tgz/);
    expect(runs).not.toMatch(/npm ci|npm run build|tsc/);
    expect(all(build, 'RUN').join(' && ')).toMatch(/npm pack .*--pack-destination \/tmp/);
  });

  it('copies into the build everything the package is made of, and it is in the repository', async () => {
    const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { files: string[] };
    const copied = all(build, 'COPY').flatMap((a) => a.split(' ').slice(0, -1));
    const needed = [
      'package.json',
      'package-lock.json',
      'tsconfig.json',
      'tsconfig.build.json',
      'scripts', // the build: tsc and the asset copy
      'src',
      'README.md',
      ...pkg.files.filter((f) => !f.startsWith('!') && f !== 'dist'), // dist is built
    ];
    expect(copied.sort()).toEqual([...new Set(needed)].sort());
    const { stdout } = await promisify(execFile)('git', ['ls-files', '--', ...copied], { cwd: ROOT });
    const tracked = stdout.split('\n');
    for (const c of copied)
      expect(
        tracked.some((f) => f === c || f.startsWith(`${c}/`)),
        c,
      ).toBe(true);
    // And .dockerignore keeps none of it out of the build context.
    const ignored = (await readFile(join(ROOT, '.dockerignore'), 'utf8'))
      .split('\n')
      .filter((l) => l.trim() !== '' && !l.startsWith('#'));
    for (const c of copied) expect(ignored, c).not.toContain(c);
    expect(ignored).toEqual(expect.arrayContaining(['node_modules', 'dist', '.fencegate']));
  });

  describe('HEALTHCHECK', () => {
    let server: FencegateProcess;
    let script: string;
    let health: string;

    beforeAll(async () => {
      const hc = all(runtime, 'HEALTHCHECK')[0] as string;
      const exec = JSON.parse(hc.slice(hc.indexOf('CMD ') + 4)) as string[];
      expect(exec.slice(0, 2)).toEqual(['node', '-e']); // no curl in slim images
      script = exec[2] as string;
      expect(script).toContain('/healthz');
      server = await startFencegate([
        '--store',
        'redis://127.0.0.1:6379',
        '--allow-volatile-redis',
        '--store-namespace',
        `fghc${process.pid}`,
        '--policies',
        'test/fixtures/empty-policy.yaml',
        '--health',
        '127.0.0.1:0',
      ]);
      health = /listening .* health=(\S+?)["\s]/.exec(server.output())?.[1] ?? '';
    }, 120_000);

    afterAll(async () => {
      await server?.kill();
    });

    async function healthcheck(control: string, healthAt?: string): Promise<number> {
      const env: NodeJS.ProcessEnv = { ...process.env, FENCEGATE_CONTROL: control };
      delete env.FENCEGATE_HEALTH;
      if (healthAt !== undefined) env.FENCEGATE_HEALTH = healthAt;
      try {
        await promisify(execFile)(process.execPath, ['-e', script], {
          env,
          timeout: 10_000,
        });
        return 0;
      } catch (err) {
        return (err as { code?: number }).code ?? -1;
      }
    }

    it('passes against a running fencegate on the port FENCEGATE_CONTROL names', async () => {
      const port = new URL(server.control).port;
      expect(await healthcheck(`0.0.0.0:${port}`)).toBe(0);
    });

    it('fails when nothing answers there', async () => {
      expect(await healthcheck(`0.0.0.0:${await freePort()}`)).toBe(1);
    });

    it('asks the probe listener FENCEGATE_HEALTH names, when there is one', async () => {
      const port = new URL(health).port;
      const nothing = `0.0.0.0:${await freePort()}`;
      expect(await healthcheck(nothing, `0.0.0.0:${port}`)).toBe(0);
      expect(await healthcheck(new URL(server.control).host, nothing)).toBe(1);
    });
  });
});
