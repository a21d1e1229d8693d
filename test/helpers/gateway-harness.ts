/**
 * Integration harness for the gateway: a real upstream (node:http on port 0) that
 * records what reached it, a policy written to a temp directory pointing at it,
 * and createGateway listening on port 0 over a given store.
 */
import type { ListenerTls } from '../../src/http/tls.js';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { request } from 'undici';
import { createGateway } from '../../src/gateway/index.js';
import type { StoreGuardOptions } from '../../src/gateway/index.js';
import type { SessionSettings } from '../../src/gateway/session.js';
import { EventLog } from '../../src/observe/events.js';
import { createMetrics, type Metrics } from '../../src/observe/metrics.js';
import { formatPolicyError, PolicyHolder } from '../../src/policies.js';
import type { KeyRing } from '../../src/sequencer/index.js';
import type { Store } from '../../src/store/types.js';

export interface UpstreamHit {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  rawHeaders: string[];
  /** Body bytes received (counted; kept in `body` only when the upstream keeps bodies). */
  bytes: number;
  body?: Buffer;
  receivedAt: number;
  answeredAt: number | null;
}

export type UpstreamHandler = (
  req: IncomingMessage,
  res: ServerResponse,
  hit: UpstreamHit,
) => void | Promise<void>;

export interface TestUpstream {
  url: string;
  hits: UpstreamHit[];
  handler: UpstreamHandler;
  close(): Promise<void>;
}

/** Answers 200 with a small JSON echo after reading the whole body. */
export const echo: UpstreamHandler = (_req, res, hit) => {
  const text = JSON.stringify({ method: hit.method, url: hit.url, bytes: hit.bytes });
  res
    .writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
    .end(text);
};

/** Answers `?size=N` with N bytes of 'a' (answers larger than a socket's buffers), anything else as `echo`. */
export const sized: UpstreamHandler = (req, res, hit) => {
  const size = Number(/[?&]size=(\d+)/.exec(hit.url)?.[1] ?? -1);
  if (size < 0) return echo(req, res, hit);
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': size }).end(Buffer.alloc(size, 'a'));
};

export async function startUpstream(
  handler: UpstreamHandler = echo,
  opts: { keepBodies?: boolean } = {},
): Promise<TestUpstream> {
  const hits: UpstreamHit[] = [];
  const upstream: TestUpstream = { url: '', hits, handler, close: async () => undefined };
  const server = createServer((req, res) => {
    const hit: UpstreamHit = {
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      rawHeaders: req.rawHeaders,
      bytes: 0,
      receivedAt: Date.now(),
      answeredAt: null,
    };
    hits.push(hit);
    res.on('finish', () => (hit.answeredAt = Date.now()));
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => {
      hit.bytes += chunk.length;
      if (opts.keepBodies) chunks.push(chunk);
    });
    if (opts.keepBodies) req.on('end', () => (hit.body = Buffer.concat(chunks)));
    req.on('end', () => void Promise.resolve(upstream.handler(req, res, hit)).catch(() => res.destroy()));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  upstream.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  upstream.close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return upstream;
}

export interface TestGateway {
  url: string;
  port: number;
  app: FastifyInstance;
  metrics: Metrics;
  events: EventLog;
  policy: PolicyHolder;
  dir: string;
  /** Rewrites the policy file and reloads. */
  setPolicy(yaml: string): Promise<void>;
  close(): Promise<void>;
}

export async function startGateway(opts: {
  store: Store;
  policy: string;
  trustProxy?: boolean;
  storeBreaker?: StoreGuardOptions;
  session?: SessionSettings;
  /** The event log (default: one that logs nothing). */
  events?: EventLog;
  /** A pino logger for the listener (default: none). */
  logger?: FastifyBaseLogger;
  accessLog?: number;
  sequencerKeys?: KeyRing | null;
  /** Default: the gateway's (ADMISSION_HOLD_MS). */
  admissionHoldMs?: number;
  /** Default: the gateway's (on). */
  refusalLane?: boolean;
  /** TLS for the data listener (default: plain HTTP). */
  tls?: ListenerTls;
}): Promise<TestGateway> {
  const dir = await mkdtemp(join(tmpdir(), 'fg-gw-'));
  const file = join(dir, 'policy.yaml');
  const holder = new PolicyHolder(file);
  const setPolicy = async (yaml: string) => {
    await writeFile(file, yaml);
    const loaded = await holder.reload();
    if (!loaded.ok) throw new Error(loaded.errors.map(formatPolicyError).join('\n'));
  };
  await setPolicy(opts.policy);
  const metrics = createMetrics({ defaultMetrics: false });
  const events = opts.events ?? new EventLog();
  const app = await createGateway({
    ...(opts.logger !== undefined ? { logger: opts.logger, accessLog: opts.accessLog } : {}),
    store: opts.store,
    policy: holder,
    metrics,
    events,
    trustProxy: opts.trustProxy,
    storeBreaker: opts.storeBreaker,
    session: opts.session,
    sequencerKeys: opts.sequencerKeys,
    admissionHoldMs: opts.admissionHoldMs,
    refusalLane: opts.refusalLane,
    tls: opts.tls,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const port = (app.server.address() as AddressInfo).port;
  return {
    url: `${opts.tls === undefined ? 'http' : 'https'}://127.0.0.1:${port}`,
    port,
    app,
    metrics,
    events,
    policy: holder,
    dir,
    setPolicy,
    async close() {
      const closing = app.close();
      app.server.closeAllConnections(); // tests are over: do not wait for clients' idle sockets
      await closing;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A policy with an "orders" upstream, fenced writes, unfenced reads and a shadow route. */
export function ordersPolicy(
  upstreamUrl: string,
  extra: { timeoutMs?: number; drainTimeoutMs?: number } = {},
): string {
  return `version: 1
upstreams:
  orders:
    kind: http
    url: ${upstreamUrl}
    timeoutMs: ${extra.timeoutMs ?? 5000}
    breaker: { volumeThreshold: 1000 }
routes:
  - name: order-writes
    methods: [POST, PUT, PATCH, DELETE]
    path: /orders/:orderId
    upstream: orders
    lock: "order:{orderId}"
    fencing:
      drainTimeoutMs: ${extra.drainTimeoutMs ?? 5000}
  - name: order-reads
    methods: [GET, HEAD]
    path: /orders/*
    upstream: orders
  - name: lease-writes
    methods: [PUT]
    path: /leased/:id
    upstream: orders
    lock: "leased:{id}"
    fencing: { check: lease }
  - name: shadow-writes
    methods: [PUT, DELETE]
    path: /shadow/:id
    upstream: orders
    lock: "shadow:{id}"
    fencing: { enforce: false }
  - name: tenant-writes
    methods: [PUT]
    path: /tenants/items/:id
    upstream: orders
    lock: "tenant:{header.x-tenant}:{id}"
`;
}

/** Mints the next token for `key`: acquires (releasing at once unless `hold`). */
/**
 * One request to the gateway's data listener. `body` is the answer parsed as JSON when
 * its content type says JSON, else `{}`; `text` is the answer as received.
 */
export async function send(
  gw: TestGateway,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
) {
  const res = await request(`${gw.url}${path}`, { method: method as 'PUT', headers, body });
  const text = await res.body.text();
  const parsed = /json/.test(String(res.headers['content-type'])) && text.length > 0 ? JSON.parse(text) : {};
  return { status: res.statusCode, headers: res.headers, text, body: parsed as Record<string, unknown> };
}

export async function mint(store: Store, key: string, opts: { hold?: boolean; ttlMs?: number } = {}) {
  const result = await store.tryAcquire({
    key,
    owner: `owner-${Math.random()}`,
    ttlMs: opts.ttlMs ?? 30_000,
  });
  if (!result.ok) throw new Error(`lock ${key} is held`);
  if (!opts.hold) await store.release(key, result.lease.leaseId);
  return result.lease;
}
