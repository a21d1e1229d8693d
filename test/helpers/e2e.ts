/**
 * Helpers for the end-to-end tests that drive the built CLI (`fencegate serve`) in
 * front of the sample upstream running in the test process: policy files, lock
 * grants through the issuer API, fenced writes, raw-socket requests, problem
 * bodies, metrics and store namespaces.
 */
import { randomBytes } from 'node:crypto';
import { rename, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import { expect } from 'vitest';
import type { AppliedWrite } from '../../src/sample/index.js';
import { sleep, waitUntil } from './wait.js';

export const SHARED_REDIS = 'redis://127.0.0.1:6379';
export const SHARED_POSTGRES = 'postgres://postgres@127.0.0.1:5432/test';

export { sleep };

/** A store namespace (Redis key prefix / Postgres schema) no other test uses. */
export function randomNamespace(prefix = 'fge2e'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

/** A unique id, for X-Request-Id and order ids. */
export function uid(prefix = 'r'): string {
  return `${prefix}-${randomBytes(5).toString('hex')}`;
}

/** Drops a Postgres schema made by a test (`--store-namespace`). */
export async function dropPostgresSchema(schema: string, url = SHARED_POSTGRES): Promise<void> {
  if (!/^[A-Za-z0-9_]+$/.test(schema)) throw new Error(`refusing to drop schema ${schema}`);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** Deletes every key under a Redis prefix on the shared Redis (tests never wipe shared data otherwise). */
export async function dropRedisPrefix(prefix: string, url = SHARED_REDIS): Promise<void> {
  const { Redis } = await import('ioredis');
  const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await r.connect();
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await r.del(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
}

export interface FencingOptions {
  check?: 'token' | 'lease';
  enforce?: boolean;
  drainTimeoutMs?: number;
}

export interface RouteSpec {
  name: string;
  methods: string[];
  path: string;
  lock?: string;
  fencing?: FencingOptions;
}

/** One policy file: the upstream "orders" at `url`, and the given routes on it. */
export function policyYaml(url: string, routes: RouteSpec[], timeoutMs = 30_000): string {
  const lines = [
    'version: 1',
    'upstreams:',
    '  orders:',
    '    kind: http',
    `    url: ${url}`,
    `    timeoutMs: ${timeoutMs}`,
  ];
  lines.push('routes:');
  for (const r of routes) {
    lines.push(
      `  - name: ${r.name}`,
      `    methods: [${r.methods.join(', ')}]`,
      `    path: ${r.path}`,
      '    upstream: orders',
    );
    if (r.lock !== undefined) lines.push(`    lock: '${r.lock}'`);
    if (r.fencing !== undefined) {
      lines.push('    fencing:');
      for (const [k, v] of Object.entries(r.fencing)) lines.push(`      ${k}: ${String(v)}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/** Writes a file the way editors save: a hidden temp file renamed over the target. */
export async function writeAtomically(path: string, text: string): Promise<void> {
  const dir = join(path, '..');
  const tmp = join(dir, `.${randomBytes(4).toString('hex')}.tmp`);
  await writeFile(tmp, text);
  await rename(tmp, path);
}

const JSON_HEADERS = { 'content-type': 'application/json' };

export interface Grant {
  key: string;
  owner: string;
  leaseId: string;
  token: string;
  expiresAt: string;
}

/** Acquires a lock through the issuer API on a control listener; expects 200. */
export async function acquire(control: string, key: string, owner: string, ttlMs = 10_000): Promise<Grant> {
  const res = await fetch(`${control}/v1/locks/${encodeURIComponent(key)}/acquire`, {
    method: 'POST',
    headers: JSON_HEADERS,
    body: JSON.stringify({ owner, ttlMs, waitMs: 20_000 }),
  });
  const body = (await res.json()) as Grant;
  expect(res.status, JSON.stringify(body)).toBe(200);
  expect(body.token).toMatch(/^[1-9]\d*$/);
  return body;
}

export async function release(control: string, grant: Grant): Promise<void> {
  const res = await fetch(`${control}/v1/locks/${encodeURIComponent(grant.key)}/release`, {
    method: 'POST',
    headers: JSON_HEADERS,
    body: JSON.stringify({ leaseId: grant.leaseId }),
  });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
}

/** Two tokens of one lock, lower < higher: grant, release, grant again. */
export async function twoTokens(control: string, key: string): Promise<[Grant, Grant]> {
  const a = await acquire(control, key, 'worker-a');
  await release(control, a);
  const b = await acquire(control, key, 'worker-b');
  expect(BigInt(b.token)).toBeGreaterThan(BigInt(a.token));
  return [a, b];
}

export interface WriteResult {
  status: number;
  headers: Headers;
  text: string;
  json(): unknown;
}

/** A write through the gateway; the body is read completely. */
export async function send(
  data: string,
  method: string,
  path: string,
  options: {
    token?: string;
    requestId?: string;
    writer?: string;
    body?: unknown;
    headers?: Record<string, string>;
  } = {},
): Promise<WriteResult> {
  const headers: Record<string, string> = { ...JSON_HEADERS, ...(options.headers ?? {}) };
  if (options.token !== undefined) headers['fencing-token'] = options.token;
  if (options.requestId !== undefined) headers['x-request-id'] = options.requestId;
  if (options.writer !== undefined) headers['x-client-id'] = options.writer;
  const res = await fetch(`${data}${path}`, {
    method,
    headers,
    ...(method === 'GET' || method === 'HEAD' ? {} : { body: JSON.stringify(options.body ?? { at: path }) }),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text) as unknown };
}

/** Asserts an RFC 9457 problem with the documented type, and returns its body. */
export function expectProblem(res: WriteResult, status: number, code: string): Record<string, unknown> {
  expect(res.status, res.text).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  const body = res.json() as Record<string, unknown>;
  expect(body).toMatchObject({ type: `urn:fencegate:${code}`, status });
  expect(typeof body.title).toBe('string');
  return body;
}

/** Sends raw bytes to host:port and returns the whole response (the request should close the connection). */
export async function rawRequest(
  base: string,
  request: string,
): Promise<{ status: number; head: string; body: string }> {
  const u = new URL(base);
  const sock = connect(Number(u.port), u.hostname);
  let out = '';
  sock.setEncoding('latin1');
  sock.on('data', (d: string) => (out += d));
  await new Promise<void>((resolve, reject) => {
    sock.once('error', reject);
    sock.once('connect', () => {
      sock.write(request);
      resolve();
    });
  });
  await new Promise<void>((resolve) => {
    sock.once('close', () => resolve());
    sock.once('error', () => resolve());
  });
  const split = out.indexOf('\r\n\r\n');
  const head = split >= 0 ? out.slice(0, split) : out;
  const m = /^HTTP\/1\.1 (\d{3})/.exec(head);
  let body = split >= 0 ? out.slice(split + 4) : '';
  if (/\r\ntransfer-encoding: chunked/i.test(head)) body = dechunk(body);
  return { status: m ? Number(m[1]) : 0, head, body };
}

function dechunk(s: string): string {
  let out = '';
  let i = 0;
  for (;;) {
    const nl = s.indexOf('\r\n', i);
    if (nl < 0) return out;
    const n = parseInt(s.slice(i, nl), 16);
    if (!Number.isFinite(n) || n === 0) return out;
    out += s.slice(nl + 2, nl + 2 + n);
    i = nl + 2 + n + 2;
  }
}

/** Reads one counter/gauge value from a /metrics page; 0 when the series is absent. */
export async function metricValue(
  control: string,
  name: string,
  labels: Record<string, string>,
): Promise<number> {
  const text = await (await fetch(`${control}/metrics`)).text();
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const m = /^[^{ ]+(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const got = new Map<string, string>();
    for (const kv of (m[1] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g))
      got.set(kv[1] as string, kv[2] as string);
    if (Object.entries(labels).every(([k, v]) => got.get(k) === v)) return Number(m[2]);
  }
  return 0;
}

/** Polls `check` until it returns true; fails with `what` after `timeoutMs`. */
export function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 20_000,
): Promise<void> {
  return waitUntil(what, check, { timeoutMs, everyMs: 25 });
}

/** The client request ids (X-Request-Id) the upstream applied, in order. */
export function appliedIds(writes: AppliedWrite[]): (string | null)[] {
  return writes.map((w) => w.clientRequestId);
}
export { startFencegate } from './procs.js';
