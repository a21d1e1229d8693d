/**
 * The system under fuzz: a real `fencegate serve` child process (embedded store in a
 * temp dir) in front of the sample upstream, started in this process so its write log
 * can be read directly as well as over HTTP.
 *
 * Routes (first match wins), all on the sample's /orders/:id so writes are applied:
 *   /orders/open      every method, unfenced            → writes applied freely
 *   /orders/leased    writes fenced, check: lease        lock "leased"
 *   /orders/shadowed  writes fenced, enforce: false      lock "shadowed"
 *   /orders/tenanted  writes fenced by a header          lock "tenant:{header.x-tenant}"
 *   /orders/:orderId  writes fenced, check: token        lock "fenced:{orderId}"
 *   /orders/*         GET/HEAD unfenced reads
 */
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startSampleUpstream, type AppliedWrite, type SampleUpstream } from '../../../src/sample/index.js';
import { startFencegate, tempDir, type FencegateProcess } from '../../helpers/procs.js';

export interface Tokens {
  /** Held lease and current token of lock "fenced:1" (admitted once: highest == current). */
  fenced: { current: string; stale: string; leaseId: string };
  leased: { current: string; stale: string; leaseId: string };
  shadowed: { current: string; stale: string; leaseId: string };
  tenant: { current: string; stale: string; leaseId: string };
}

export interface LockSnapshot {
  key: string;
  status: number;
  held: boolean | null;
  token: string | null;
  issued: string | null;
  highest: string | null;
}

export interface FuzzEnv {
  fg: FencegatePorts;
  sample: SampleUpstream;
  proc: FencegateProcess;
  tokens: Tokens;
  /** Starts fencegate again on the same store and policy (after a crash); updates fg and proc. */
  restart(): Promise<void>;
  close(): Promise<void>;
}

export interface FencegatePorts {
  data: string;
  control: string;
  dataPort: number;
  controlPort: number;
}

export const LOCKS = ['fenced:1', 'leased', 'shadowed', 'tenant:t1'] as const;
/** Long enough that no lease used by the fuzzer expires during a run. */
const HOLD_TTL_MS = 30 * 60 * 1000;

function policy(upstream: string): string {
  return `version: 1
upstreams:
  sample:
    kind: http
    url: ${upstream}
    timeoutMs: 5000
routes:
  - name: open
    methods: [GET, HEAD, POST, PUT, PATCH, DELETE]
    path: /orders/open
    upstream: sample
    shadows: [fenced] # literal ids before the general fenced route, on purpose
  - name: leased
    methods: [POST, PUT, PATCH, DELETE]
    path: /orders/leased
    upstream: sample
    lock: leased
    fencing: { check: lease }
    shadows: [fenced]
  - name: shadowed
    methods: [POST, PUT, PATCH, DELETE]
    path: /orders/shadowed
    upstream: sample
    lock: shadowed
    fencing: { enforce: false }
    shadows: [fenced]
  - name: tenanted
    methods: [POST, PUT, PATCH, DELETE]
    path: /orders/tenanted
    upstream: sample
    lock: 'tenant:{header.x-tenant}'
    shadows: [fenced]
  - name: fenced
    methods: [POST, PUT, PATCH, DELETE]
    path: /orders/:orderId
    upstream: sample
    lock: 'fenced:{orderId}'
  - name: reads
    methods: [GET, HEAD]
    path: /orders/*
    upstream: sample
  - name: history
    methods: [GET]
    path: /_writes
    upstream: sample
`;
}

async function json(
  url: string,
  init: RequestInit = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    body = { raw: text };
  }
  return { status: res.status, body };
}

export async function acquire(control: string, key: string, owner: string) {
  const r = await json(`${control}/v1/locks/${encodeURIComponent(key)}/acquire`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ owner, ttlMs: HOLD_TTL_MS }),
  });
  if (r.status !== 200) throw new Error(`acquire ${key}: ${r.status} ${JSON.stringify(r.body)}`);
  return { token: String(r.body.token), leaseId: String(r.body.leaseId) };
}

async function release(control: string, key: string, leaseId: string): Promise<void> {
  const r = await json(`${control}/v1/locks/${encodeURIComponent(key)}/release`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ leaseId }),
  });
  if (r.status !== 200) throw new Error(`release ${key}: ${r.status}`);
}

/** A valid fenced write through the gateway; returns the status. */
export async function validWrite(
  data: string,
  id: string,
  token: string,
  extra: Record<string, string> = {},
): Promise<number> {
  const res = await fetch(`${data}/orders/${id}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', 'fencing-token': token, ...extra },
    body: JSON.stringify({ valid: true }),
    signal: AbortSignal.timeout(10_000),
  });
  await res.arrayBuffer();
  return res.status;
}

/** Two grants per lock (the first released: its token is stale), the second held. */
async function grant(control: string, key: string) {
  const first = await acquire(control, key, 'fuzz-setup-old');
  await release(control, key, first.leaseId);
  const second = await acquire(control, key, 'fuzz-setup');
  return { current: second.token, stale: first.token, leaseId: second.leaseId };
}

export async function startFuzzEnv(): Promise<FuzzEnv> {
  const sample = await startSampleUpstream({ port: 0 });
  const storeDir = await tempDir('fg-fuzz-store-');
  const policyDir = await tempDir('fg-fuzz-policy-');
  await writeFile(join(policyDir, 'fuzz.yaml'), policy(sample.url));
  let proc: FencegateProcess;
  try {
    proc = await startFencegate(['--store', storeDir, '--policies', policyDir]);
  } catch (err) {
    await sample.close();
    throw err;
  }
  const fg: FencegatePorts = {
    data: proc.data,
    control: proc.control,
    dataPort: Number(new URL(proc.data).port),
    controlPort: Number(new URL(proc.control).port),
  };
  const close = async () => {
    await proc.kill('SIGKILL');
    await sample.close();
    await rm(storeDir, { recursive: true, force: true });
    await rm(policyDir, { recursive: true, force: true });
  };
  try {
    const tokens: Tokens = {
      fenced: await grant(fg.control, 'fenced:1'),
      leased: await grant(fg.control, 'leased'),
      shadowed: await grant(fg.control, 'shadowed'),
      tenant: await grant(fg.control, 'tenant:t1'),
    };
    // Admit the current tokens once, so highest == current for the enforced locks.
    const admitted = [
      await validWrite(fg.data, '1', tokens.fenced.current),
      await validWrite(fg.data, 'leased', tokens.leased.current),
      await validWrite(fg.data, 'tenanted', tokens.tenant.current, { 'x-tenant': 't1' }),
    ];
    if (admitted.some((s) => s !== 200 && s !== 201)) throw new Error(`setup writes: ${admitted.join(',')}`);
    const env: FuzzEnv = {
      fg,
      sample,
      proc,
      tokens,
      close,
      async restart() {
        await env.proc.kill('SIGKILL');
        env.proc = proc = await startFencegate(['--store', storeDir, '--policies', policyDir]);
        Object.assign(env.fg, {
          data: proc.data,
          control: proc.control,
          dataPort: Number(new URL(proc.data).port),
          controlPort: Number(new URL(proc.control).port),
        });
      },
    };
    return env;
  } catch (err) {
    await close();
    throw err;
  }
}

export async function lockSnapshot(control: string, key: string): Promise<LockSnapshot> {
  const r = await json(`${control}/v1/locks/${encodeURIComponent(key)}`);
  const s = (k: string) => (r.body[k] === null || r.body[k] === undefined ? null : String(r.body[k]));
  return {
    key,
    status: r.status,
    held: typeof r.body.held === 'boolean' ? r.body.held : null,
    token: s('token'),
    issued: s('issued'),
    highest: s('highest'),
  };
}

/** The upstream's applied writes, over HTTP (what an outside observer sees). */
export async function upstreamWrites(sampleUrl: string): Promise<AppliedWrite[]> {
  const r = await fetch(`${sampleUrl}/_writes`, { signal: AbortSignal.timeout(10_000) });
  return (await r.json()) as AppliedWrite[];
}

export async function healthz(control: string): Promise<number> {
  const r = await fetch(`${control}/healthz`, { signal: AbortSignal.timeout(10_000) });
  await r.arrayBuffer();
  return r.status;
}
