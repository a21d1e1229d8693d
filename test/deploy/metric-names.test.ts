/**
 * The Grafana dashboard and the alert rules name only metrics (and label values) that
 * a real fencegate exports: a server started in-process with a fenced route, after a
 * few requests, is scraped, and every selector in every query is looked up in it.
 * A failure lists what is missing, so a renamed metric cannot leave a panel on
 * "no data" or an alert that can never fire.
 */
import { randomBytes } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { DEPRECATED_ALIASES } from '../../src/observe/metrics.js';
import { VERSION } from '../../src/version.js';
import { startSampleUpstream, type SampleUpstream } from '../../src/sample/index.js';
import { startServer, type RunningServer } from '../../src/serve.js';
import { ROOT, tempDir } from '../helpers/procs.js';

/** Series Prometheus makes itself, not fencegate: `up` for every scrape target. */
const FROM_PROMETHEUS = new Set(['up']);

export interface Selector {
  name: string;
  matchers: { label: string; op: string; value: string }[];
}

const GROUPING = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);
/** Aggregation operators may put their `by (…)` before the parentheses: `sum by (x) (…)`. */
const AGGREGATIONS = [
  'sum',
  'min',
  'max',
  'avg',
  'group',
  'stddev',
  'stdvar',
  'count',
  'count_values',
].concat(['bottomk', 'topk', 'quantile', 'limitk', 'limit_ratio']);
const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'atan2',
  'inf',
  'nan',
  ...GROUPING,
  ...AGGREGATIONS,
]);

/** The metric selectors in a PromQL expression (names, and label matchers when written). */
export function selectors(expr: string): Selector[] {
  const out: Selector[] = [];
  let i = 0;
  const skipTo = (close: string) => {
    while (i < expr.length && expr[i] !== close) {
      if (expr[i] === '"' || expr[i] === "'") skipString();
      else i += 1;
    }
    i += 1;
  };
  const skipString = () => {
    const q = expr[i];
    i += 1;
    while (i < expr.length && expr[i] !== q) i += expr[i] === '\\' ? 2 : 1;
    i += 1;
  };
  while (i < expr.length) {
    const c = expr[i] as string;
    if (c === '"' || c === "'") {
      skipString();
    } else if (c === '[') {
      skipTo(']');
    } else if (c === '{') {
      skipTo('}'); // a selector without a name: {__name__=~…} is not used here
    } else if (/[A-Za-z_:]/.test(c) && !/[\w$.]/.test(expr[i - 1] ?? ' ')) {
      const ident = /^[A-Za-z_:][\w:]*/.exec(expr.slice(i))?.[0] as string;
      i += ident.length;
      const rest = expr.slice(i);
      const next = rest.trimStart()[0];
      if (next === '(') {
        if (GROUPING.has(ident)) {
          i += rest.indexOf('(');
          skipTo(')');
        }
        continue; // a function call: its arguments are scanned next
      }
      if (KEYWORDS.has(ident)) continue;
      const selector: Selector = { name: ident, matchers: [] };
      if (next === '{') {
        const start = i + rest.indexOf('{');
        i = start;
        skipTo('}');
        const body = expr.slice(start + 1, i - 1);
        for (const m of body.matchAll(/([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)) {
          selector.matchers.push({ label: m[1] as string, op: m[2] as string, value: m[3] as string });
        }
      }
      out.push(selector);
    } else {
      i += 1;
    }
  }
  return out;
}

/** Every PromQL expression in the dashboard (panel targets, variable queries) and the alert rules. */
async function queries(): Promise<{ where: string; expr: string }[]> {
  const out: { where: string; expr: string }[] = [];
  const dashboard = JSON.parse(await readFile(join(ROOT, 'deploy', 'grafana', 'fencegate.json'), 'utf8')) as {
    panels: { title: string; targets?: { expr: string }[] }[];
    templating: { list: { name: string; query: { query: string } }[] };
  };
  for (const p of dashboard.panels)
    for (const t of p.targets ?? []) out.push({ where: `panel "${p.title}"`, expr: t.expr });
  for (const v of dashboard.templating.list) {
    // label_values(SELECTOR, label): the selector is PromQL.
    const m = /^label_values\((.*),\s*\w+\)$/.exec(v.query.query);
    out.push({ where: `variable $${v.name}`, expr: m ? (m[1] as string) : v.query.query });
  }
  const rules = parse(await readFile(join(ROOT, 'deploy', 'prometheus', 'alerts.yml'), 'utf8')) as {
    groups: { rules: { alert: string; expr: string }[] }[];
  };
  for (const g of rules.groups)
    for (const r of g.rules) out.push({ where: `alert ${r.alert}`, expr: r.expr });
  return out;
}

/**
 * Sample name → the label sets of its samples, from the text exposition format. A
 * family declared by `# TYPE` counts as exported even before its first sample (a
 * labelled counter nothing has incremented yet), under its sample names.
 */
function exposition(text: string): Map<string, Record<string, string>[]> {
  const samples = new Map<string, Record<string, string>[]>();
  const declare = (name: string) => samples.set(name, samples.get(name) ?? []);
  for (const line of text.split('\n')) {
    const type = /^# TYPE ([A-Za-z_:][\w:]*) (\w+)/.exec(line);
    if (type) {
      const [, name, kind] = type as unknown as [string, string, string];
      const suffixes =
        kind === 'histogram'
          ? ['_bucket', '_sum', '_count']
          : kind === 'summary'
            ? ['', '_sum', '_count']
            : [''];
      for (const suffix of suffixes) declare(name + suffix);
      continue;
    }
    if (line.startsWith('#') || line.trim() === '') continue;
    const m = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1] as string] = l[2] as string;
    const list = samples.get(m[1] as string) ?? [];
    list.push(labels);
    samples.set(m[1] as string, list);
  }
  return samples;
}

/** What the queries name that the exposition lacks: "metric" or "metric{label="value"}", with where. */
function missing(
  used: { where: string; expr: string }[],
  samples: Map<string, Record<string, string>[]>,
): string[] {
  const problems = new Map<string, Set<string>>();
  const note = (what: string, where: string) =>
    problems.set(what, (problems.get(what) ?? new Set()).add(where));
  for (const { where, expr } of used) {
    for (const s of selectors(expr)) {
      if (FROM_PROMETHEUS.has(s.name)) continue;
      const series = samples.get(s.name);
      if (series === undefined) {
        note(s.name, where);
        continue;
      }
      for (const m of s.matchers) {
        if (m.op !== '=' || m.value.includes('$')) continue; // dashboard variables, negative matchers
        if (!series.some((labels) => labels[m.label] === m.value))
          note(`${s.name}{${m.label}="${m.value}"}`, where);
      }
    }
  }
  return [...problems].map(([what, wheres]) => `${what} (${[...wheres].join(', ')})`).sort();
}

describe('metric names in the dashboard and alert rules', () => {
  it('finds the selectors of an expression', () => {
    expect(
      selectors(
        'histogram_quantile(0.99, sum by (le, op) (rate(fencegate_store_operation_duration_seconds_bucket{instance=~"$instance"}[$__rate_interval]))) > 2 * max without (x) (up{job="fencegate"} offset 5m) and on (instance) process_resident_memory_bytes',
      ),
    ).toEqual([
      {
        name: 'fencegate_store_operation_duration_seconds_bucket',
        matchers: [{ label: 'instance', op: '=~', value: '$instance' }],
      },
      { name: 'up', matchers: [{ label: 'job', op: '=', value: 'fencegate' }] },
      { name: 'process_resident_memory_bytes', matchers: [] },
    ]);
  });

  describe('against a running fencegate', () => {
    let dir: string;
    let sample: SampleUpstream;
    let server: RunningServer;

    beforeAll(async () => {
      dir = await tempDir('fg-metric-names-');
      sample = await startSampleUpstream({ host: '127.0.0.1', port: 0 });
      // The example policies: a fenced route, a shadow-mode one, plain ones; upstream the sample.
      for (const file of ['orders.yaml', 'shadow.yaml']) {
        const text = await readFile(join(ROOT, 'policies', file), 'utf8');
        await writeFile(
          join(dir, file),
          text.replace('url: http://${FENCEGATE_SAMPLE:-127.0.0.1:9000}', `url: ${sample.url}`),
        );
      }
      const config = resolveConfig({
        flags: {
          store: 'redis://127.0.0.1:6379',
          allowVolatileRedis: true,
          storeNamespace: `fgmn${randomBytes(4).toString('hex')}`,
          listen: '127.0.0.1:0',
          control: '127.0.0.1:0',
          policies: dir,
          logLevel: 'warn',
        },
      });
      server = await startServer(config);
    }, 60_000);

    afterAll(async () => {
      await server?.close();
      await sample?.close();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    async function acquire(): Promise<{ token: string; leaseId: string }> {
      const res = await fetch(`${server.control}/v1/locks/order%3A7/acquire`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"owner":"metrics-test","ttlMs":10000}',
      });
      expect(res.status).toBe(200);
      return (await res.json()) as { token: string; leaseId: string };
    }

    async function put(token?: string): Promise<number> {
      const res = await fetch(`${server.data}/orders/7`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json', ...(token ? { 'fencing-token': token } : {}) },
        body: '{"status":"new"}',
      });
      await res.body?.cancel();
      return res.status;
    }

    it('exports every metric and label value the queries use', async () => {
      // Some traffic: an admitted write, a missing token, a stale token, a read, no route.
      const first = await acquire();
      expect(await put(first.token)).toBeLessThan(300);
      expect(await put()).toBe(428);
      const release = await fetch(`${server.control}/v1/locks/order%3A7/release`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ leaseId: first.leaseId }),
      });
      expect(release.status).toBeLessThan(300);
      const second = await acquire();
      expect(await put(second.token)).toBeLessThan(300);
      expect(await put(first.token)).toBe(409);
      expect((await fetch(`${server.data}/orders/7`)).status).toBe(200);
      expect((await fetch(`${server.data}/nowhere`)).status).toBe(404);

      const res = await fetch(`${server.control}/metrics`);
      expect(res.status).toBe(200);
      const samples = exposition(await res.text());
      expect(samples.size).toBeGreaterThan(10);
      const used = await queries();
      expect(used.length).toBeGreaterThan(20);
      expect(missing(used, samples)).toEqual([]);

      // No query leans on a deprecated alias: they go in the next release.
      const deprecated: string[] = Object.values(DEPRECATED_ALIASES);
      const onAliases = used.flatMap(({ where, expr }) =>
        selectors(expr)
          .filter((s) => deprecated.some((old) => s.name === old || s.name.startsWith(`${old}_`)))
          .map((s) => `${s.name} (${where})`),
      );
      expect(onAliases).toEqual([]);
    }, 60_000);

    it('names every duration *_duration_seconds (old names as deprecated aliases), and exports fencegate_build_info', async () => {
      const text = await (await fetch(`${server.control}/metrics`)).text();
      const histograms = [...text.matchAll(/^# TYPE (fencegate_\w+) histogram$/gm)].map(
        (m) => m[1] as string,
      );
      const deprecated: string[] = Object.values(DEPRECATED_ALIASES);
      expect(histograms.filter((n) => !n.endsWith('_duration_seconds') && !deprecated.includes(n))).toEqual(
        [],
      );
      for (const [name, old] of Object.entries(DEPRECATED_ALIASES)) {
        expect(histograms).toContain(name);
        expect(histograms).toContain(old);
        expect(text).toMatch(new RegExp(`^# HELP ${old} Deprecated alias of ${name} `, 'm'));
        // The alias counts what the new name counts.
        const counts = (n: string) =>
          [...text.matchAll(new RegExp(`^${n}_count(\\{[^}]*\\})? (\\S+)$`, 'gm'))].map(
            (m) => `${m[1]} ${m[2]}`,
          );
        expect(counts(old)).toEqual(counts(name));
      }
      expect(text).toContain(`fencegate_build_info{version="${VERSION}",node="${process.versions.node}"} 1`);
    });
  });
});
