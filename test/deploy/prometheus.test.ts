/**
 * The Prometheus files in deploy/prometheus, checked by Prometheus's own promtool:
 * the alert rules parse, their unit tests pass (each alert fires on what should raise
 * it and not on its neighbours), and the scrape config is valid.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/procs.js';

const DIR = join(ROOT, 'deploy', 'prometheus');

async function promtool(...args: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)('promtool', args, { cwd: DIR, timeout: 60_000 });
    return { code: 0, output: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : 1, output: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

interface Rules {
  groups: { rules: { alert: string; expr: string }[] }[];
}
interface RuleTests {
  rule_files: string[];
  tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[];
}

describe('deploy/prometheus', () => {
  it('alerts.yml passes promtool check rules', async () => {
    const r = await promtool('check', 'rules', 'alerts.yml');
    expect(r.output).toMatch(/SUCCESS: \d+ rules found/);
    expect(r.code).toBe(0);
  });

  it('alerts.test.yml passes promtool test rules', async () => {
    const r = await promtool('test', 'rules', 'alerts.test.yml');
    expect(r.output).toContain('SUCCESS');
    expect(r.code).toBe(0);
  });

  it('tests every alert both firing and not firing', async () => {
    const rules = parse(await readFile(join(DIR, 'alerts.yml'), 'utf8')) as Rules;
    const tests = parse(await readFile(join(DIR, 'alerts.test.yml'), 'utf8')) as RuleTests;
    expect(tests.rule_files).toEqual(['alerts.yml']);
    const cases = tests.tests.flatMap((t) => t.alert_rule_test);
    const alerts = rules.groups.flatMap((g) => g.rules.map((r) => r.alert));
    for (const name of alerts) {
      const mine = cases.filter((c) => c.alertname === name);
      expect(
        mine.some((c) => c.exp_alerts.length > 0),
        `${name} fires`,
      ).toBe(true);
      expect(
        mine.some((c) => c.exp_alerts.length === 0),
        `${name} stays quiet`,
      ).toBe(true);
    }
    // The alerts the operations guide explains.
    expect(alerts).toEqual(
      expect.arrayContaining([
        'FencegateDown',
        'FencegateStaleWriteSpike',
        'FencegateFailClosed',
        'FencegateStoreErrors',
        'FencegateStoreBreakerOpen',
        'FencegateUpstreamBreakerOpen',
        'FencegateLeaseRenewFailures',
      ]),
    );
    const guide = await readFile(join(ROOT, 'docs', 'operations.md'), 'utf8');
    for (const name of alerts) expect(guide, `docs/operations.md explains ${name}`).toContain(`### ${name}`);
  });

  it('prometheus.yml passes promtool check config and loads the rules', async () => {
    const r = await promtool('check', 'config', 'prometheus.yml');
    expect(r.output).toMatch(/SUCCESS: 1 rule files found/);
    expect(r.code).toBe(0);
  });
});
