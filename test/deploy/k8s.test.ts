/**
 * The Kubernetes manifests in deploy/k8s, checked offline against the Kubernetes API:
 * - kubernetes-models' validate() (its JSON schemas, generated from the API's OpenAPI
 *   definitions): types, required fields, formats;
 * - the same package's TypeScript interfaces, with the compiler's excess-property
 *   check: an unknown (misspelled) field is an error, which the OpenAPI schemas allow;
 * - and what ties the objects together: selectors, named ports, probes, the Secret and
 *   ConfigMap the pod uses (whose policies must load), graceful shutdown.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import ts from 'typescript';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { parseAuthText } from '../../src/auth/file.js';
import { parsePolicyText } from '../../src/policies.js';
import { ROOT } from '../helpers/procs.js';

const K8S = join(ROOT, 'deploy', 'k8s');

interface Manifest {
  file: string;
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  [key: string]: unknown;
}

/** apiVersion/kind → the kubernetes-models module and its interface. */
const MODELS: Record<string, { module: string; iface: string }> = {
  'v1/Secret': { module: 'kubernetes-models/v1/Secret', iface: 'ISecret' },
  'v1/ConfigMap': { module: 'kubernetes-models/v1/ConfigMap', iface: 'IConfigMap' },
  'v1/Service': { module: 'kubernetes-models/v1/Service', iface: 'IService' },
  'apps/v1/Deployment': { module: 'kubernetes-models/apps/v1/Deployment', iface: 'IDeployment' },
  'policy/v1/PodDisruptionBudget': {
    module: 'kubernetes-models/policy/v1/PodDisruptionBudget',
    iface: 'IPodDisruptionBudget',
  },
  'autoscaling/v2/HorizontalPodAutoscaler': {
    module: 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler',
    iface: 'IHorizontalPodAutoscaler',
  },
};

async function loadManifests(): Promise<Manifest[]> {
  const out: Manifest[] = [];
  const files = (await readdir(K8S)).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
  for (const file of files.sort()) {
    for (const doc of parseAllDocuments(await readFile(join(K8S, file), 'utf8'))) {
      if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]?.message}`);
      const data = doc.toJS() as Manifest | null;
      if (data !== null) out.push({ ...data, file });
    }
  }
  return out;
}

/** runtime validation with the package's generated JSON-schema validators; returns "file kind: message" lines. */
async function schemaErrors(manifests: Manifest[]): Promise<string[]> {
  const errors: string[] = [];
  for (const m of manifests) {
    const model = MODELS[`${m.apiVersion}/${m.kind}`];
    if (model === undefined) {
      errors.push(`${m.file}: no schema for ${m.apiVersion} ${m.kind}`);
      continue;
    }
    const mod = (await import(model.module)) as Record<string, new (data: unknown) => { validate(): void }>;
    const Class = mod[m.kind] as new (data: unknown) => { validate(): void };
    const { file: _file, ...data } = m;
    try {
      new Class(data).validate();
    } catch (err) {
      errors.push(`${m.file} ${m.kind}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  return errors;
}

/**
 * Type-checks each manifest as an object literal of its kubernetes-models interface:
 * unknown fields (excess properties), wrong types and missing required fields are
 * reported as "file kind: message".
 */
function typeErrors(manifests: Manifest[]): string[] {
  const virtual = join(ROOT, 'test', 'deploy', '__k8s_manifests__.ts');
  const lines: string[] = [];
  const owner: string[] = [];
  manifests.forEach((m, i) => {
    const model = MODELS[`${m.apiVersion}/${m.kind}`];
    if (model === undefined) return;
    const { file, ...data } = m;
    lines.push(`import type { ${model.iface} as T${i} } from '${model.module}';`);
    owner.push('');
    const literal = JSON.stringify(data, null, 2).split('\n');
    literal[0] = `export const m${i}: T${i} = ${literal[0]}`;
    literal[literal.length - 1] += ';';
    for (const l of literal) {
      lines.push(l);
      owner.push(`${file} ${m.kind}`);
    }
  });
  const text = lines.join('\n');
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    skipLibCheck: true,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, ...rest) =>
    name === virtual ? ts.createSourceFile(name, text, version) : getSourceFile(name, version, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === virtual || fileExists(name);
  const program = ts.createProgram([virtual], options, host);
  const source = program.getSourceFile(virtual) as ts.SourceFile;
  return ts.getPreEmitDiagnostics(program, source).map((d) => {
    const line = d.start === undefined ? 0 : source.getLineAndCharacterOfPosition(d.start).line;
    return `${owner[line] || '(imports)'}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
  });
}

function byKind<T = Record<string, unknown>>(manifests: Manifest[], kind: string): (Manifest & T)[] {
  return manifests.filter((m) => m.kind === kind) as (Manifest & T)[];
}

/* eslint-disable @typescript-eslint/no-explicit-any -- manifests are plain YAML data, walked by field name */
describe('deploy/k8s', () => {
  it('are Kubernetes objects that validate against the API schemas', async () => {
    const manifests = await loadManifests();
    expect(manifests.map((m) => m.kind).sort()).toEqual([
      'ConfigMap',
      'Deployment',
      'HorizontalPodAutoscaler',
      'PodDisruptionBudget',
      'Secret',
      'Secret',
      'Service',
    ]);
    expect(await schemaErrors(manifests)).toEqual([]);
    expect(typeErrors(manifests)).toEqual([]);
  }, 60_000);

  it('catches a misspelled field, a wrong type and a missing required field', async () => {
    const [deployment] = byKind(await loadManifests(), 'Deployment');
    const spoil = (change: (d: any) => void) => {
      const copy = structuredClone(deployment) as any;
      change(copy);
      return [copy];
    };
    const typo = spoil((d) => {
      const c = d.spec.template.spec.containers[0];
      c.readinesProbe = c.readinessProbe;
      delete c.readinessProbe;
    });
    expect(await schemaErrors(typo)).toEqual([]); // the OpenAPI schemas allow unknown fields
    expect(typeErrors(typo).join('\n')).toMatch(
      /deployment\.yaml Deployment: .*readinesProbe.* does not exist in type 'IContainer'/,
    );
    const wrongType = spoil((d) => (d.spec.template.spec.containers[0].ports[0].containerPort = '8080'));
    expect((await schemaErrors(wrongType)).join('\n')).toMatch(/containerPort must be integer/);
    expect(typeErrors(wrongType).join('\n')).toMatch(/Type 'string' is not assignable to type 'number'/);
    const missing = spoil((d) => delete d.spec.selector);
    expect((await schemaErrors(missing)).join('\n')).toMatch(
      /data\/spec must have required property selector/,
    );
    expect(typeErrors(missing).join('\n')).toMatch(
      /Property '"selector"' is missing .* in type 'IDeploymentSpec'/,
    );
  }, 60_000);

  it('tie together: selectors, named ports, probes, Secret, ConfigMap, autoscaling', async () => {
    const manifests = await loadManifests();
    const [deployment] = byKind<{ spec: any }>(manifests, 'Deployment');
    const [service] = byKind<{ spec: any }>(manifests, 'Service');
    const [pdb] = byKind<{ spec: any }>(manifests, 'PodDisruptionBudget');
    const [hpa] = byKind<{ spec: any }>(manifests, 'HorizontalPodAutoscaler');
    const secrets = byKind<{ stringData: Record<string, string> }>(manifests, 'Secret');
    const secret = secrets.find((s) => s.metadata.name === 'fencegate-store');
    const authSecret = secrets.find((s) => s.metadata.name === 'fencegate-auth');
    const [configMap] = byKind<{ data: Record<string, string> }>(manifests, 'ConfigMap');
    if (!deployment || !service || !pdb || !hpa || !secret || !authSecret || !configMap)
      throw new Error('missing object');

    const pod = deployment.spec.template;
    const podLabels = pod.metadata.labels as Record<string, string>;
    const selects = (selector: Record<string, string>) =>
      Object.entries(selector).every(([k, v]) => podLabels[k] === v);
    expect(selects(deployment.spec.selector.matchLabels)).toBe(true);
    expect(selects(service.spec.selector)).toBe(true);
    expect(selects(pdb.spec.selector.matchLabels)).toBe(true);
    expect(hpa.spec.scaleTargetRef).toEqual({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      name: deployment.metadata.name,
    });
    expect(hpa.spec.minReplicas).toBeGreaterThan(pdb.spec.minAvailable);

    const [c] = pod.spec.containers;
    const ports = new Map<string, number>(c.ports.map((p: any) => [p.name, p.containerPort]));
    expect(ports).toEqual(
      new Map([
        ['data', 8080],
        ['control', 9090],
        ['health', 9091],
      ]),
    );
    for (const p of service.spec.ports) expect(ports.has(p.targetPort), p.name).toBe(true);
    // Probes and scrapes go to the probe listener, which needs no credential.
    expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'health' });
    expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'health' });
    expect(c.startupProbe.httpGet).toEqual({ path: '/healthz', port: 'health' });
    expect(pod.metadata.annotations['prometheus.io/port']).toBe('9091');
    expect(c.resources.requests.cpu).toBeDefined(); // the HPA's utilisation is relative to it

    // Graceful shutdown: the pod leaves the endpoints during preStop, then SIGTERM drains.
    const [sleep, seconds] = c.lifecycle.preStop.exec.command;
    expect(sleep).toBe('sleep');
    expect(pod.spec.terminationGracePeriodSeconds).toBeGreaterThan(Number(seconds) + 30);

    // Non-root, as the image (deploy/Dockerfile: USER 1000:1000).
    expect(pod.spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 });
    const dockerfile = await readFile(join(ROOT, 'deploy', 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^USER 1000:1000$/m);

    // The store comes from the Secret; the policies from the ConfigMap, at the path served.
    const env = new Map<string, any>(c.env.map((e: any) => [e.name, e]));
    const storeRef = env.get('FENCEGATE_STORE').valueFrom.secretKeyRef;
    expect(storeRef.name).toBe(secret.metadata.name);
    expect(Object.keys(secret.stringData)).toContain(storeRef.key);
    expect(secret.stringData[storeRef.key]).toMatch(/^(postgres|redis):\/\//);
    const policiesPath = env.get('FENCEGATE_POLICIES').value;
    const mount = c.volumeMounts.find((m: any) => m.mountPath === policiesPath);
    const volume = pod.spec.volumes.find((v: any) => v.name === mount.name);
    expect(volume.configMap.name).toBe(configMap.metadata.name);
    for (const [name, text] of Object.entries(configMap.data)) {
      const parsed = parsePolicyText(name, text);
      expect(parsed.ok ? [] : parsed.errors, name).toEqual([]);
    }
    expect(env.get('FENCEGATE_CONTROL').value).toBe('0.0.0.0:9090');
    expect(env.get('FENCEGATE_LISTEN').value).toBe('0.0.0.0:8080');
    expect(env.get('FENCEGATE_HEALTH').value).toBe('0.0.0.0:9091');

    // The control listener binds all interfaces, so it needs an auth file (or it would not
    // start): mounted from the Secret, and one that loads.
    expect(env.has('FENCEGATE_INSECURE')).toBe(false);
    const authPath = env.get('FENCEGATE_AUTH').value as string;
    const authMount = c.volumeMounts.find((m: any) => authPath.startsWith(`${m.mountPath}/`));
    const authVolume = pod.spec.volumes.find((v: any) => v.name === authMount.name);
    expect(authVolume.secret.secretName).toBe(authSecret.metadata.name);
    const authFile = authPath.slice(authMount.mountPath.length + 1);
    expect(Object.keys(authSecret.stringData)).toContain(authFile);
    expect(
      parseAuthText(authFile, authSecret.stringData[authFile] as string).principals.length,
    ).toBeGreaterThan(0);
  });

  it('kustomization.yaml lists every manifest', async () => {
    const k = parseAllDocuments(await readFile(join(K8S, 'kustomization.yaml'), 'utf8'))[0]?.toJS() as {
      resources: string[];
    };
    const files = (await readdir(K8S)).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    expect([...k.resources].sort()).toEqual(files.sort());
  });
});
