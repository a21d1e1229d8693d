/**
 * Server configuration: defaults < config file (--config, YAML) < environment
 * (FENCEGATE_*) < flags. The result is validated and frozen; every error names
 * where the bad value came from (file:line and field, the variable, or the flag).
 */
import { readFileSync } from 'node:fs';
import { LineCounter, parseDocument, isMap, isScalar } from 'yaml';
import type { Pair, Scalar } from 'yaml';
import { LOG_FORMATS, LOG_LEVELS, type LogFormat, type LogLevel } from './observe/log.js';
import { checkStoreSpec } from './store/index.js';
import { namespaceProblem } from './store/namespace.js';
import { ADMISSION_HOLD_MS } from './gateway/admission-hold.js';

export interface HostPort {
  host: string;
  port: number;
}

export interface ServeConfig {
  store: string;
  /** Redis key prefix or Postgres schema; lets several deployments share one server. */
  storeNamespace: string | null;
  listen: HostPort;
  control: HostPort;
  policies: string;
  allowVolatileRedis: boolean;
  /** Run the sample upstream (for the out-of-the-box demo) on this address. */
  sample: HostPort | null;
  defaultTtlMs: number;
  minTtlMs: number;
  maxTtlMs: number;
  maxWaitMs: number;
  /** A store call on the request path slower than this fails the write with 503. */
  storeTimeoutMs: number;
  /** How long the store's circuit stays open before one trial call goes through. */
  storeResetTimeoutMs: number;
  /** How long other gateways wait on this one's silent session before dropping its in-flight writes. */
  sessionTtlMs: number;
  /** How long one store admission serves the same token's next writes on a lock (0: every write asks the store). */
  admissionHoldMs: number;
  /** Answer refusals that need no waiting before node:http reads the request (docs/gateway.md, "The refusal lane"). */
  refusalLane: boolean;
  /**
   * Sequencer key file (JSON; fencegate keys init). Null: the embedded store's
   * `<dir>/sequencer-keys.json` (made on first start); no sequencers on other stores.
   */
  sequencerKeys: string | null;
  /** Data listener TLS: certificate chain and key (PEM files); both or neither. Null: plain HTTP. */
  tlsCert: string | null;
  tlsKey: string | null;
  /** Data listener mTLS: clients must present a certificate from this CA (PEM bundle). */
  tlsClientCa: string | null;
  /** Control listener TLS, as for the data listener (its own files: no fallback between listeners). */
  controlTlsCert: string | null;
  controlTlsKey: string | null;
  controlTlsClientCa: string | null;
  /** CA bundle trusted, besides Node's built-in roots, by https upstreams without their own `tls.ca`. */
  upstreamCa: string | null;
  /** CA bundle that a rediss:// store's certificate must chain to (instead of Node's built-in roots). */
  storeCa: string | null;
  logLevel: LogLevel;
  /** null: pretty when stdout is a terminal, else json. */
  logFormat: LogFormat | null;
  /** Share of data-listener requests written to the access log: 0 (off) to 1 (every one). */
  accessLog: number;
  /** Auth file (YAML or JSON): principals, credentials, grants. Null: no authentication. */
  auth: string | null;
  /** Probe listener: /healthz, /readyz, /metrics without credentials. Null: none. */
  health: HostPort | null;
  /** Serve the control listener without an auth file on a non-loopback address. */
  insecure: boolean;
  /**
   * Processes serving the data listener (serve --workers, docs/adr/0008-workers.md); null:
   * the CPUs available (os.availableParallelism()). 1 runs everything in one process.
   */
  workers: number | null;
}

/** The most worker processes `--workers` accepts. */
export const MAX_WORKERS = 256;

export const DEFAULTS: ServeConfig = Object.freeze({
  store: './.fencegate',
  storeNamespace: null,
  listen: { host: '127.0.0.1', port: 8080 },
  control: { host: '127.0.0.1', port: 9090 },
  policies: './policies',
  allowVolatileRedis: false,
  sample: null,
  defaultTtlMs: 10_000,
  minTtlMs: 100,
  maxTtlMs: 3_600_000,
  maxWaitMs: 300_000,
  storeTimeoutMs: 2_000,
  storeResetTimeoutMs: 5_000,
  sessionTtlMs: 6_000,
  admissionHoldMs: ADMISSION_HOLD_MS,
  refusalLane: true,
  sequencerKeys: null,
  tlsCert: null,
  tlsKey: null,
  tlsClientCa: null,
  controlTlsCert: null,
  controlTlsKey: null,
  controlTlsClientCa: null,
  upstreamCa: null,
  storeCa: null,
  logLevel: 'info',
  logFormat: null,
  accessLog: 1,
  auth: null,
  health: null,
  insecure: false,
  workers: null,
});

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** Parses HOST:PORT, [IPv6]:PORT or :PORT. Port 0 picks a free port. */
export function parseHostPort(value: string, where: string): HostPort {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(value.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new ConfigError(`${where}: "${value}" is not HOST:PORT (port 0–65535)`);
  return { host: m[1] ?? (m[2] || '127.0.0.1'), port };
}

function parseIntIn(value: string | number, where: string, min: number, max: number): number {
  const n = typeof value === 'number' ? value : /^\d+$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new ConfigError(`${where}: "${value}" must be an integer between ${min} and ${max}`);
  }
  return n;
}

function parseEnum<T extends string>(
  value: string | number | boolean,
  where: string,
  allowed: readonly T[],
): T {
  if (typeof value === 'string' && (allowed as readonly string[]).includes(value)) return value as T;
  throw new ConfigError(`${where}: "${String(value)}" must be one of ${allowed.join('|')}`);
}

/** on (1), off (0), or the share of requests logged, a fraction between 0 and 1. */
function parseAccessLog(value: string | number | boolean, where: string): number {
  if (value === true || value === 'on') return 1;
  if (value === false || value === 'off') return 0;
  const n = typeof value === 'number' ? value : /^(0|1|0?\.\d+|1\.0*)$/.test(value) ? Number(value) : NaN;
  if (!(n >= 0 && n <= 1)) {
    throw new ConfigError(`${where}: "${String(value)}" must be on, off, or a fraction between 0 and 1`);
  }
  return n;
}

/** auto (null: the CPUs available) or a process count. */
function parseWorkers(value: string | number | boolean, where: string): number | null {
  if (value === 'auto') return null;
  const n =
    typeof value === 'number'
      ? value
      : typeof value === 'string' && /^\d+$/.test(value)
        ? Number(value)
        : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_WORKERS) {
    throw new ConfigError(
      `${where}: "${String(value)}" must be auto or an integer between 1 and ${MAX_WORKERS}`,
    );
  }
  return n;
}

function parseBool(value: string | boolean, where: string): boolean {
  if (typeof value === 'boolean') return value;
  if (/^(1|true|yes|on)$/i.test(value)) return true;
  if (/^(0|false|no|off)$/i.test(value)) return false;
  throw new ConfigError(`${where}: "${value}" must be true or false`);
}

export type RawSettings = Partial<Record<keyof ServeConfig, string | number | boolean>>;

type Kind =
  'string' | 'name' | 'hostport' | 'bool' | 'int' | 'hostport?' | 'level' | 'format' | 'sample' | 'workers';

const KEYS: Record<keyof ServeConfig, Kind> = {
  store: 'string',
  storeNamespace: 'name',
  listen: 'hostport',
  control: 'hostport',
  policies: 'string',
  allowVolatileRedis: 'bool',
  sample: 'hostport?',
  defaultTtlMs: 'int',
  minTtlMs: 'int',
  maxTtlMs: 'int',
  maxWaitMs: 'int',
  storeTimeoutMs: 'int',
  storeResetTimeoutMs: 'int',
  sessionTtlMs: 'int',
  admissionHoldMs: 'int',
  refusalLane: 'bool',
  sequencerKeys: 'string',
  tlsCert: 'string',
  tlsKey: 'string',
  tlsClientCa: 'string',
  controlTlsCert: 'string',
  controlTlsKey: 'string',
  controlTlsClientCa: 'string',
  upstreamCa: 'string',
  storeCa: 'string',
  logLevel: 'level',
  logFormat: 'format',
  accessLog: 'sample',
  auth: 'string',
  health: 'hostport?',
  insecure: 'bool',
  workers: 'workers',
};

export const ENV_VARS: Partial<Record<keyof ServeConfig, string>> = {
  store: 'FENCEGATE_STORE',
  storeNamespace: 'FENCEGATE_STORE_NAMESPACE',
  listen: 'FENCEGATE_LISTEN',
  control: 'FENCEGATE_CONTROL',
  policies: 'FENCEGATE_POLICIES',
  allowVolatileRedis: 'FENCEGATE_ALLOW_VOLATILE_REDIS',
  sample: 'FENCEGATE_SAMPLE',
  storeTimeoutMs: 'FENCEGATE_STORE_TIMEOUT_MS',
  storeResetTimeoutMs: 'FENCEGATE_STORE_RESET_TIMEOUT_MS',
  sessionTtlMs: 'FENCEGATE_SESSION_TTL_MS',
  admissionHoldMs: 'FENCEGATE_ADMISSION_HOLD_MS',
  refusalLane: 'FENCEGATE_REFUSAL_LANE',
  sequencerKeys: 'FENCEGATE_SEQUENCER_KEYS',
  tlsCert: 'FENCEGATE_TLS_CERT',
  tlsKey: 'FENCEGATE_TLS_KEY',
  tlsClientCa: 'FENCEGATE_TLS_CLIENT_CA',
  controlTlsCert: 'FENCEGATE_CONTROL_TLS_CERT',
  controlTlsKey: 'FENCEGATE_CONTROL_TLS_KEY',
  controlTlsClientCa: 'FENCEGATE_CONTROL_TLS_CLIENT_CA',
  upstreamCa: 'FENCEGATE_UPSTREAM_CA',
  storeCa: 'FENCEGATE_STORE_CA',
  logLevel: 'FENCEGATE_LOG_LEVEL',
  logFormat: 'FENCEGATE_LOG_FORMAT',
  accessLog: 'FENCEGATE_ACCESS_LOG',
  auth: 'FENCEGATE_AUTH',
  health: 'FENCEGATE_HEALTH',
  insecure: 'FENCEGATE_INSECURE',
  workers: 'FENCEGATE_WORKERS',
};

function applyOne(cfg: ServeConfig, key: keyof ServeConfig, value: string | number | boolean, where: string) {
  const kind = KEYS[key];
  const target = cfg as unknown as Record<string, unknown>;
  switch (kind) {
    case 'string':
      if (typeof value !== 'string' || value.length === 0)
        throw new ConfigError(`${where}: must be a non-empty string`);
      if (key === 'store') {
        const bad = checkStoreSpec(value);
        if (bad !== null) throw new ConfigError(`${where}: ${bad}`);
      }
      target[key] = value;
      break;
    case 'name': {
      const problem = namespaceProblem(String(value));
      if (typeof value !== 'string' || problem !== null) throw new ConfigError(`${where}: ${problem}`);
      target[key] = value;
      break;
    }
    case 'hostport':
    case 'hostport?':
      if (typeof value !== 'string') throw new ConfigError(`${where}: must be "HOST:PORT"`);
      target[key] = parseHostPort(value, where);
      break;
    case 'bool':
      target[key] = parseBool(value as string | boolean, where);
      break;
    case 'int':
      target[key] = parseIntIn(value as string | number, where, 0, 86_400_000);
      break;
    case 'level':
      target[key] = parseEnum(value, where, LOG_LEVELS);
      break;
    case 'format':
      target[key] = parseEnum(value, where, LOG_FORMATS);
      break;
    case 'sample':
      target[key] = parseAccessLog(value, where);
      break;
    case 'workers':
      target[key] = parseWorkers(value, where);
      break;
  }
}

/** Reads a YAML config file: a flat mapping of the ServeConfig keys. */
export function readConfigFile(path: string): RawSettings & { __where: Record<string, string> } {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(
      `${path}: cannot read config file (${(err as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const at = (offset: number | undefined) => {
    const p = lines.linePos(offset ?? 0);
    return `${path}:${p.line}:${p.col}`;
  };
  const firstError = doc.errors[0];
  if (firstError) throw new ConfigError(`${at(firstError.pos[0])}: ${firstError.message.split('\n')[0]}`);
  const out: RawSettings & { __where: Record<string, string> } = { __where: {} };
  if (doc.contents === null) return out;
  if (!isMap(doc.contents)) throw new ConfigError(`${at(0)}: the config file must be a mapping of settings`);
  for (const item of doc.contents.items as Pair<Scalar, unknown>[]) {
    const keyNode = item.key;
    const name = isScalar(keyNode) ? String(keyNode.value) : '?';
    const where = `${at(keyNode?.range?.[0])}: ${name}`;
    if (!(name in KEYS))
      throw new ConfigError(`${where}: unknown setting; known: ${Object.keys(KEYS).join(', ')}`);
    const v = isScalar(item.value) ? item.value.value : undefined;
    if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') {
      throw new ConfigError(`${where}: must be a single value`);
    }
    out[name as keyof ServeConfig] = v;
    out.__where[name] = where;
  }
  return out;
}

export interface ConfigSources {
  file?: string;
  env?: NodeJS.ProcessEnv;
  flags?: RawSettings;
}

export function resolveConfig(sources: ConfigSources): Readonly<ServeConfig> {
  const cfg: ServeConfig = structuredClone({ ...DEFAULTS }) as ServeConfig;
  // The settings some source gave (the rest keep their defaults).
  const given = new Set<keyof ServeConfig>();
  const apply = (key: keyof ServeConfig, v: string | number | boolean, where: string) => {
    given.add(key);
    applyOne(cfg, key, v, where);
  };
  if (sources.file) {
    const raw = readConfigFile(sources.file);
    for (const key of Object.keys(KEYS) as (keyof ServeConfig)[]) {
      const v = raw[key];
      if (v !== undefined) apply(key, v, raw.__where[key] ?? `${sources.file}: ${key}`);
    }
  }
  const env = sources.env ?? {};
  for (const [key, name] of Object.entries(ENV_VARS) as [keyof ServeConfig, string][]) {
    const v = env[name];
    if (v !== undefined && v !== '') apply(key, v, `environment ${name}`);
  }
  for (const [key, v] of Object.entries(sources.flags ?? {}) as [keyof ServeConfig, string | boolean][]) {
    if (v !== undefined) apply(key, v, `--${flagName(key)}`);
  }
  if (cfg.minTtlMs < 1 || cfg.minTtlMs > cfg.maxTtlMs)
    throw new ConfigError('minTtlMs must be ≥ 1 and ≤ maxTtlMs');
  if (cfg.defaultTtlMs < cfg.minTtlMs || cfg.defaultTtlMs > cfg.maxTtlMs) {
    throw new ConfigError('defaultTtlMs must lie between minTtlMs and maxTtlMs');
  }
  if (cfg.storeTimeoutMs < 10 || cfg.storeTimeoutMs > 60_000)
    throw new ConfigError('storeTimeoutMs must lie between 10 and 60000');
  if (cfg.storeResetTimeoutMs < 100 || cfg.storeResetTimeoutMs > 3_600_000)
    throw new ConfigError('storeResetTimeoutMs must lie between 100 and 3600000');
  if (cfg.sessionTtlMs < 300 || cfg.sessionTtlMs > 600_000)
    throw new ConfigError('sessionTtlMs must lie between 300 and 600000');
  // A Redis that may lose its state loses a hold's entry too: holds only when asked for there.
  if (cfg.allowVolatileRedis && !given.has('admissionHoldMs')) cfg.admissionHoldMs = 0;
  if (cfg.admissionHoldMs < 0 || cfg.admissionHoldMs > 1_000)
    throw new ConfigError('admissionHoldMs must lie between 0 and 1000');
  checkTlsSettings(cfg);
  return deepFreeze(cfg);
}

/**
 * The TLS settings that only make sense together: a certificate needs its key (and the
 * other way round), a client CA needs the listener to speak TLS, a store CA needs a
 * rediss:// store. The files themselves are read and checked at start (src/http/tls.ts).
 */
function checkTlsSettings(cfg: ServeConfig): void {
  const listeners = [
    ['tlsCert', 'tlsKey', 'tlsClientCa'],
    ['controlTlsCert', 'controlTlsKey', 'controlTlsClientCa'],
  ] as const;
  for (const [cert, key, ca] of listeners) {
    if ((cfg[cert] === null) !== (cfg[key] === null)) {
      const [given, missing] = cfg[cert] === null ? [key, cert] : [cert, key];
      throw new ConfigError(
        `--${flagName(given)} needs --${flagName(missing)} (a certificate and its key go together)`,
      );
    }
    if (cfg[ca] !== null && cfg[cert] === null)
      throw new ConfigError(
        `--${flagName(ca)} needs --${flagName(cert)} and --${flagName(key)} (mTLS is TLS)`,
      );
  }
  if (cfg.storeCa !== null && !/^rediss:\/\//i.test(cfg.store)) {
    throw new ConfigError(
      '--store-ca applies to a rediss:// store; for Postgres put sslmode=verify-full&sslrootcert=FILE in the URL',
    );
  }
}

/** Whether a listener on `host` can be reached only from this machine. */
export function isLoopback(host: string): boolean {
  const h = host.toLowerCase();
  return h === 'localhost' || h === '::1' || /^(::ffff:)?127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * Secure by default: without an auth file the control listener takes no credentials,
 * so anyone who reaches it can take any lock and read live tokens. It may then bind
 * only a loopback address, unless told --insecure. The refusal, as one line, or null.
 */
export function exposureProblem(cfg: Readonly<ServeConfig>): string | null {
  if (cfg.auth !== null || cfg.insecure || isLoopback(cfg.control.host)) return null;
  const at = cfg.control.host.includes(':') ? `[${cfg.control.host}]` : cfg.control.host;
  return (
    `refusing to serve the control listener on ${at}:${cfg.control.port} without authentication: ` +
    'anyone who reaches it could take any lock and read live tokens; give --auth FILE ' +
    '(docs/security.md), bind it to 127.0.0.1, or pass --insecure to serve it open anyway'
  );
}

export function flagName(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

function deepFreeze<T>(o: T): Readonly<T> {
  for (const v of Object.values(o as object)) if (v && typeof v === 'object') deepFreeze(v);
  return Object.freeze(o);
}
