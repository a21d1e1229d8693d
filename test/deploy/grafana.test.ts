/**
 * deploy/grafana/fencegate.json is a well-formed dashboard (unique panel ids, panels
 * inside the 24-column grid and not overlapping, every query on the provisioned
 * datasource, every $variable defined) that shows what operators look for. That its
 * queries name real metrics is test/deploy/metric-names.test.ts.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/procs.js';

interface Panel {
  id: number;
  type: string;
  title: string;
  gridPos: { x: number; y: number; w: number; h: number };
  datasource?: { type: string; uid: string };
  targets?: { refId: string; expr: string; datasource: { uid: string } }[];
}
interface Dashboard {
  uid: string;
  panels: Panel[];
  templating: { list: { name: string }[] };
}

async function dashboard(): Promise<Dashboard> {
  return JSON.parse(await readFile(join(ROOT, 'deploy', 'grafana', 'fencegate.json'), 'utf8')) as Dashboard;
}

describe('deploy/grafana/fencegate.json', () => {
  it('is well formed', async () => {
    const d = await dashboard();
    expect(d.uid).toBe('fencegate');
    const ids = d.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const cells = new Map<string, string>();
    for (const p of d.panels) {
      const { x, y, w, h } = p.gridPos;
      expect(x + w, p.title).toBeLessThanOrEqual(24);
      for (let i = x; i < x + w; i++)
        for (let j = y; j < y + h; j++) {
          const key = `${i},${j}`;
          expect(cells.get(key), `${p.title} overlaps ${cells.get(key)}`).toBeUndefined();
          cells.set(key, p.title);
        }
    }
    const variables = new Set(d.templating.list.map((v) => v.name));
    for (const p of d.panels.filter((q) => q.type !== 'row')) {
      expect(p.datasource?.uid, p.title).toBe('prometheus');
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      const refIds = (p.targets ?? []).map((t) => t.refId);
      expect(new Set(refIds).size, p.title).toBe(refIds.length);
      for (const t of p.targets ?? []) {
        expect(t.datasource.uid, p.title).toBe('prometheus');
        for (const [, name] of t.expr.matchAll(/\$(?!__)(\w+)/g))
          expect(variables, `$${name}`).toContain(name);
      }
    }
  });

  it('shows fencing, traffic, breakers, the store, leases and the process', async () => {
    const d = await dashboard();
    const exprs = d.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr.replace(/\s+/g, ' ')));
    const shown = (re: RegExp) => exprs.some((e) => re.test(e));
    const wanted: [string, RegExp][] = [
      ['fenced writes by route and reason', /by \(route, reason\) \(rate\(fencegate_fenced_writes_total\{/],
      ['admitted writes', /fencegate_admitted_writes_total/],
      ['requests by status class', /by \(status_class\) \(rate\(fencegate_requests_total/],
      ['upstream latency', /histogram_quantile\(.*fencegate_upstream_request_duration_seconds_bucket/],
      ['breaker state', /fencegate_breaker_state\{.*state="open"/],
      ['store operation latency', /histogram_quantile\(.*fencegate_store_operation_duration_seconds_bucket/],
      ['store errors', /fencegate_store_errors_total/],
      ['drain timeouts', /fencegate_drain_timeouts_total/],
      ['lease expiries', /fencegate_leases_expired_total/],
      ['renewal failures', /fencegate_lease_renew_failures_total/],
      ['lock waiters', /fencegate_lock_waiters/],
      ['process memory', /process_resident_memory_bytes/],
      ['event-loop lag', /nodejs_eventloop_lag_\w*seconds/],
    ];
    for (const [what, re] of wanted) expect(shown(re), what).toBe(true);
  });
});
