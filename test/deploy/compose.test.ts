/**
 * deploy/docker-compose.yml: accepted by docker-compose (1.29, `config`, no daemon
 * needed), and wired as the operations guide says: Redis durable, fencegate on both
 * stores, Prometheus scraping every fencegate's control port with the alert rules,
 * Grafana provisioned with the dashboard and a datasource of the uid it uses.
 */
import { execFile } from 'node:child_process';
import { access, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/procs.js';

const DEPLOY = join(ROOT, 'deploy');
const COMPOSE = join(DEPLOY, 'docker-compose.yml');

async function compose(file: string, ...args: string[]) {
  try {
    const r = await promisify(execFile)('docker-compose', ['-f', file, ...args], { timeout: 60_000 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? 1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

interface Service {
  image?: string;
  build?: { context: string; dockerfile: string };
  command?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: ({ published: number; target: number } | string)[];
}

/** A port as `docker-compose config` prints it: an object, or "HOST_IP:PUBLISHED:TARGET/PROTO". */
function port(p: { published: number; target: number } | string) {
  if (typeof p !== 'string') return { hostIp: null, published: p.published, target: p.target };
  const m = /^(?:([\d.]+):)?(\d+):(\d+)(?:\/\w+)?$/.exec(p);
  if (!m) throw new Error(`unexpected port ${p}`);
  return { hostIp: m[1] ?? null, published: Number(m[2]), target: Number(m[3]) };
}

/* eslint-disable @typescript-eslint/no-explicit-any -- provisioning files are plain YAML data */
describe('deploy/docker-compose.yml', () => {
  it('is accepted by docker-compose config', async () => {
    const r = await compose(COMPOSE, 'config', '-q');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
  });

  it('is refused when broken (the check can fail)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fg-compose-'));
    try {
      const text = await readFile(COMPOSE, 'utf8');
      const broken = join(dir, 'docker-compose.yml');
      await writeFile(
        broken,
        text.replace('    image: redis:7-alpine\n', '    image: redis:7-alpine\n    imagee: x\n'),
      );
      const r = await compose(broken, 'config', '-q');
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(/imagee/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('wires the stores, fencegate, Prometheus and Grafana together', async () => {
    const r = await compose(COMPOSE, 'config');
    expect(r.code).toBe(0);
    const config = parse(r.stdout) as { services: Record<string, Service> };
    const s = config.services;

    // Redis: fencegate refuses one that could lose an acknowledged token.
    const redisArgs = (s.redis?.command ?? []).join(' ');
    expect(redisArgs).toContain('--appendonly yes');
    expect(redisArgs).toContain('--appendfsync always');
    expect(redisArgs).toContain('--maxmemory-policy noeviction');

    // fencegate on each store, built from deploy/Dockerfile, with the policies mounted.
    const gateways = Object.entries(s).filter(([, v]) => v.image === 'fencegate:local');
    const stores = gateways.map(([, v]) => v.environment?.FENCEGATE_STORE ?? '');
    expect(stores.some((u) => u.startsWith('postgres://') && u.includes('@postgres:5432/'))).toBe(true);
    expect(stores.some((u) => u === 'redis://redis:6379')).toBe(true);
    for (const [name, g] of gateways) {
      expect(g.build?.dockerfile, name).toBe('deploy/Dockerfile');
      await access(join(g.build?.context ?? '', 'deploy', 'Dockerfile'));
      expect(g.volumes, name).toContain(`${join(ROOT, 'policies')}:/app/policies:ro`);
      const ports = (g.ports ?? []).map(port);
      expect(ports.map((p) => p.target).sort(), name).toEqual([8080, 9090]);
      // Without an auth file the control listener must be told --insecure (or it would not
      // start), and then it is published on the host's loopback only.
      if (g.environment?.FENCEGATE_AUTH === undefined) {
        expect(g.environment?.FENCEGATE_INSECURE, name).toBe('true');
        expect(ports.find((p) => p.target === 9090)?.hostIp, name).toBe('127.0.0.1');
      }
    }

    // Prometheus scrapes every fencegate's control port and loads the alert rules.
    expect(s.prometheus?.volumes).toContain(`${join(DEPLOY, 'prometheus')}:/etc/prometheus:ro`);
    const prom = parse(await readFile(join(DEPLOY, 'prometheus', 'prometheus.yml'), 'utf8')) as any;
    expect(prom.rule_files).toEqual(['alerts.yml']);
    const targets: string[] = prom.scrape_configs.flatMap((c: any) =>
      c.static_configs.flatMap((sc: any) => sc.targets),
    );
    expect(targets.sort()).toEqual(gateways.map(([name]) => `${name}:9090`).sort());

    // Grafana: the dashboard file and provisioning; the datasource has the uid the panels use.
    const grafanaVolumes = s.grafana?.volumes ?? [];
    expect(grafanaVolumes).toContain(
      `${join(DEPLOY, 'grafana', 'provisioning')}:/etc/grafana/provisioning:ro`,
    );
    const dashboardMount = grafanaVolumes.find((v) => v.includes('fencegate.json')) as string;
    const [hostDashboard, containerDashboard] = dashboardMount.split(':') as [string, string];
    expect(resolve(hostDashboard)).toBe(join(DEPLOY, 'grafana', 'fencegate.json'));
    const provider = parse(
      await readFile(join(DEPLOY, 'grafana', 'provisioning', 'dashboards', 'fencegate.yml'), 'utf8'),
    ) as any;
    expect(containerDashboard.startsWith(`${provider.providers[0].options.path}/`)).toBe(true);
    const datasources = parse(
      await readFile(join(DEPLOY, 'grafana', 'provisioning', 'datasources', 'prometheus.yml'), 'utf8'),
    ) as any;
    const [ds] = datasources.datasources;
    expect(ds.url).toBe('http://prometheus:9090');
    const dashboard = JSON.parse(await readFile(join(DEPLOY, 'grafana', 'fencegate.json'), 'utf8')) as any;
    const uids = new Set<string>(
      dashboard.panels.filter((p: any) => p.type !== 'row').map((p: any) => p.datasource.uid),
    );
    expect([...uids]).toEqual([ds.uid]);
  });
});
