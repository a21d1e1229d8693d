/**
 * docs/postgres.md's worked example, run as written: its `sh` block goes to bash in a
 * directory laid out like a checkout (bin/ and policies/ of this one), against the shared
 * Postgres, with the built CLI. Three things differ, so that it can run beside anything:
 * the database name (`shop` → a fresh one), and the listeners (`localhost:8080`,
 * `localhost:9090` → free ports, given to fencegate as FENCEGATE_LISTEN and
 * FENCEGATE_CONTROL). Every `#   …` line of the block must match, in order, what the
 * commands print (`…` standing for anything).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile, rm, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomNamespace, SHARED_POSTGRES } from '../helpers/e2e.js';
import { freePort, ROOT, tempDir } from '../helpers/procs.js';
import { withPgClient } from '../helpers/sql-fixtures.js';

/** The `sh` block under "## Worked example". */
async function exampleScript(): Promise<string> {
  const doc = await readFile(join(ROOT, 'docs', 'postgres.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Worked example'));
  const m = /```sh\n([\s\S]*?)```/.exec(section);
  if (m === null) throw new Error('docs/postgres.md: no sh block under "## Worked example"');
  return m[1] as string;
}

/** `#   {…}` → a pattern for the whole line, `…` matching anything. */
function expectedLines(script: string): RegExp[] {
  return script
    .split('\n')
    .filter((l) => l.startsWith('#   '))
    .map((l) => {
      const parts = l
        .slice(4)
        .split('…')
        .map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
      return new RegExp(`^${parts.join('.*')}$`);
    });
}

describe("docs/postgres.md's worked example", () => {
  const db = randomNamespace('fgexample');
  let dir: string;

  beforeAll(async () => {
    dir = await tempDir('fg-pg-example-');
    await symlink(join(ROOT, 'bin'), join(dir, 'bin'));
    await symlink(join(ROOT, 'policies'), join(dir, 'policies'));
  });
  afterAll(async () => {
    await withPgClient(SHARED_POSTGRES, (c) => c.query(`DROP DATABASE IF EXISTS "${db}" WITH (FORCE)`));
    await rm(dir, { recursive: true, force: true });
  });

  it('runs as written and prints what it says', async () => {
    const [data, control] = [await freePort(), await freePort()];
    const source = await exampleScript();
    const script = source
      .replace(/\bshop\b/g, db)
      .replaceAll('localhost:8080', `127.0.0.1:${data}`)
      .replaceAll('localhost:9090', `127.0.0.1:${control}`);
    const pg = new URL(SHARED_POSTGRES);
    // Its own process group: whatever happens, nothing it started outlives the test.
    const bash = spawn('bash', ['-e', '-o', 'pipefail', '-c', script], {
      cwd: dir,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        PGHOST: pg.hostname,
        PGPORT: pg.port,
        PGUSER: decodeURIComponent(pg.username),
        FENCEGATE_LISTEN: `127.0.0.1:${data}`,
        FENCEGATE_CONTROL: `127.0.0.1:${control}`,
        FENCEGATE_WORKERS: '1',
      },
    });
    let out = '';
    let err = '';
    bash.stdout.on('data', (d: Buffer) => (out += d.toString()));
    bash.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => process.kill(-(bash.pid as number), 'SIGKILL'), 60_000);
    const [code] = (await once(bash, 'exit')) as [number | null];
    clearTimeout(timer);
    try {
      process.kill(-(bash.pid as number), 'SIGKILL');
    } catch {
      // the group is gone
    }
    const log = await readFile(join(dir, 'fencegate.log'), 'utf8').catch(() => '(no log)');
    expect(code, `stderr:\n${err}\nstdout:\n${out}\nfencegate.log:\n${log}`).toBe(0);
    const printed = out.split('\n').filter((l) => l !== '');
    const wanted = expectedLines(source);
    expect(wanted.length).toBeGreaterThan(4);
    expect(printed).toHaveLength(wanted.length);
    wanted.forEach((re, i) => expect(printed[i], `line ${i + 1}`).toMatch(re));
  });
});
