import { copyFile, mkdir, mkdtemp, readFile, rename, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PolicyHolder, type ReloadResult } from '../../src/policies.js';
import { sleep } from '../helpers/wait.js';

const VALID = 'test/fixtures/policies/valid';

async function policyDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'fg-holder-'));
  await copyFile(join(VALID, '10-upstreams.yaml'), join(dir, '10-upstreams.yaml'));
  await copyFile(join(VALID, '20-routes.yaml'), join(dir, '20-routes.yaml'));
  return dir;
}

const holders: PolicyHolder[] = [];
afterEach(() => {
  for (const h of holders.splice(0)) h.unwatch();
});

describe('PolicyHolder', () => {
  it('serves no routes until the first successful reload', async () => {
    const holder = new PolicyHolder(await policyDir());
    expect(holder.current.routes).toEqual([]);
    const result = await holder.reload();
    expect(result.ok).toBe(true);
    expect(holder.current.routes).toHaveLength(3);
  });

  it('keeps the last good policy when a reload fails, and reports the errors', async () => {
    const dir = await policyDir();
    const opened = await PolicyHolder.open(dir);
    if (!opened.ok) throw new Error('expected ok');
    const holder = opened.holder;
    const before = holder.current;
    await writeFile(join(dir, '20-routes.yaml'), 'version: 1\nroutes:\n  - name: x\n');
    const result = await holder.reload();
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.errors.map((e) => e.field)).toContain('routes[0].methods');
    expect(holder.current).toBe(before);
  });

  it('notifies subscribers; calls made together share one load', async () => {
    const holder = new PolicyHolder(await policyDir());
    const seen: number[] = [];
    holder.subscribe((p) => seen.push(p.routes.length));
    const results = await Promise.all([holder.reload(), holder.reload(), holder.reload()]);
    expect(results.every((r) => r.ok)).toBe(true);
    expect(new Set(results).size).toBe(1);
    expect(seen).toEqual([3]);
  });

  it('a reload asked for while one runs reads the files as they are after the call', async () => {
    const dir = await policyDir();
    const holder = new PolicyHolder(dir);
    const first = holder.reload();
    await writeFile(join(dir, '20-routes.yaml'), 'version: 1\nroutes: []\n');
    const second = holder.reload();
    expect(second).not.toBe(first);
    await first;
    const result = await second;
    expect(result.ok && result.policy.routes).toEqual([]);
    expect(holder.current.routes).toEqual([]);
  });

  it('watch() reloads after a change, debounced', async () => {
    const dir = await policyDir();
    const holder = new PolicyHolder(dir);
    holders.push(holder);
    await holder.reload();
    const reloaded = new Promise<ReloadResult>((resolve) => holder.watch(resolve, { debounceMs: 50 }));
    const text = await readFile(join(dir, '20-routes.yaml'), 'utf8');
    await writeFile(join(dir, '20-routes.yaml'), text.replace('name: order-reads', 'name: order-reads-v2'));
    const result = await reloaded;
    expect(result.ok).toBe(true);
    expect(holder.current.routes.map((r) => r.name)).toContain('order-reads-v2');
  });

  it('watch() on a single file ignores other files in its directory', async () => {
    const dir = await policyDir();
    const file = join(dir, 'single.yaml');
    await writeFile(file, await readFile('policies/orders.yaml', 'utf8'));
    const holder = new PolicyHolder(file);
    holders.push(holder);
    await holder.reload();
    const results: ReloadResult[] = [];
    holder.watch((r) => results.push(r), { debounceMs: 30 });
    await writeFile(join(dir, 'other.yaml'), 'version: 1\n');
    await sleep(200);
    expect(results).toEqual([]);
    await writeFile(file, 'version: 1\nbogus: true\n');
    await sleep(300);
    expect(results.length).toBeGreaterThanOrEqual(1);
    expect(results.at(-1)?.ok).toBe(false);
    expect(holder.current.routes.length).toBe(3);
  });

  it('open() with mayBeMissing serves no routes where nothing exists, and is strict otherwise', async () => {
    const missing = join(await mkdtemp(join(tmpdir(), 'fg-holder-')), 'policies');
    const opened = await PolicyHolder.open(missing, { mayBeMissing: true });
    expect(opened.ok && opened.missing).toBe(true);
    if (opened.ok) expect(opened.holder.current.routes).toEqual([]);
    const strict = await PolicyHolder.open(missing);
    expect(strict.ok).toBe(false);
    const present = await PolicyHolder.open(await policyDir(), { mayBeMissing: true });
    expect(present.ok && !present.missing && present.holder.current.routes.length).toBe(3);
  });

  it('watch() on a path that does not exist yet starts watching after the first successful reload', async () => {
    const parent = await mkdtemp(join(tmpdir(), 'fg-holder-'));
    const dir = join(parent, 'policies');
    const holder = new PolicyHolder(dir);
    holders.push(holder);
    const results: ReloadResult[] = [];
    const changed = new Promise<void>((resolve) =>
      holder.watch(
        (r) => {
          results.push(r);
          if (r.ok && r.policy.routes.some((route) => route.name === 'order-reads-v2')) resolve();
        },
        { debounceMs: 30 },
      ),
    );
    expect((await holder.reload()).ok).toBe(false); // still nothing there
    await mkdir(dir);
    const source = await policyDir();
    for (const f of ['10-upstreams.yaml', '20-routes.yaml']) await copyFile(join(source, f), join(dir, f));
    expect((await holder.reload()).ok).toBe(true); // e.g. SIGHUP
    const text = await readFile(join(dir, '20-routes.yaml'), 'utf8');
    await writeFile(join(dir, '20-routes.yaml'), text.replace('name: order-reads', 'name: order-reads-v2'));
    await changed; // seen by the watcher started after the load
    expect(holder.current.routes.map((r) => r.name)).toContain('order-reads-v2');
  });

  it('unwatch() before the path exists cancels the deferred watcher', async () => {
    const dir = join(await mkdtemp(join(tmpdir(), 'fg-holder-')), 'policies');
    const holder = new PolicyHolder(dir);
    const results: ReloadResult[] = [];
    holder.watch((r) => results.push(r), { debounceMs: 30 });
    holder.unwatch();
    await mkdir(dir);
    const source = await policyDir();
    for (const f of ['10-upstreams.yaml', '20-routes.yaml']) await copyFile(join(source, f), join(dir, f));
    expect((await holder.reload()).ok).toBe(true);
    await writeFile(join(dir, '30-more.yaml'), 'version: 1\n');
    await sleep(300);
    expect(results).toEqual([]);
  });

  it('watch() sees a Kubernetes ConfigMap update (an atomic swap of the ..data symlink)', async () => {
    // The layout kubelet writes: orders.yaml -> ..data/orders.yaml, ..data -> ..<timestamp>/
    const dir = await mkdtemp(join(tmpdir(), 'fg-holder-k8s-'));
    const source = await policyDir();
    const version = async (name: string, routes: string) => {
      await mkdir(join(dir, name));
      await copyFile(join(source, '10-upstreams.yaml'), join(dir, name, '10-upstreams.yaml'));
      await writeFile(join(dir, name, '20-routes.yaml'), routes);
    };
    const routes = await readFile(join(source, '20-routes.yaml'), 'utf8');
    await version('..2026_01_01_v1', routes);
    await symlink('..2026_01_01_v1', join(dir, '..data'));
    for (const f of ['10-upstreams.yaml', '20-routes.yaml']) await symlink(join('..data', f), join(dir, f));
    const opened = await PolicyHolder.open(dir);
    if (!opened.ok) throw new Error('expected ok');
    const holder = opened.holder;
    holders.push(holder);
    const reloaded = new Promise<ReloadResult>((resolve) => holder.watch(resolve, { debounceMs: 50 }));
    await version('..2026_01_01_v2', routes.replace('name: order-reads', 'name: order-reads-v2'));
    await symlink('..2026_01_01_v2', join(dir, '..data_tmp'));
    await rename(join(dir, '..data_tmp'), join(dir, '..data'));
    const result = await reloaded;
    expect(result.ok).toBe(true);
    expect(holder.current.routes.map((r) => r.name)).toContain('order-reads-v2');
  });
});
