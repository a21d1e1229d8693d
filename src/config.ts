/**
 * Server configuration: defaults < config file (--config, YAML) < environment
 * (FENCEGATE_*) < flags, for the settings of the table in src/settings.ts (each row's
 * key, variable, flag, type, default and range). The result is validated and frozen;
 * every error names where the bad value came from (file:line and field, the variable,
 * or the flag), and a value out of its row's range also names the setting.
 */
import { readFileSync } from 'node:fs';
import { LineCounter, parseDocument, isMap, isScalar } from 'yaml';
import type { Pair, Scalar } from 'yaml';
import { LOG_FORMATS, LOG_LEVELS } from './observe/log.js';
import { checkStoreSpec } from './store/index.js';
import { namespaceProblem } from './store/namespace.js';
import { parseAllowedHosts } from './http/allowed-hosts.js';
import { SETTING_ROWS, SETTINGS, type SettingKey, type SettingRow, type SettingValues } from './settings.js';
import type { HostPort } from './settings.js';

export type { HostPort } from './settings.js';
export { MAX_WORKERS } from './settings.js';

/** The resolved settings of `fencegate serve`: one field per row of src/settings.ts. */
export type ServeConfig = SettingValues;

export const DEFAULTS: ServeConfig = Object.freeze(
  Object.fromEntries(
    SETTING_ROWS.map(([key, row]) => [
      key,
      row.default !== null && typeof row.default === 'object' ? { ...row.default } : row.default,
    ]),
  ) as ServeConfig,
);

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

/** An integer from min to max; the message states `shown`, the range of the setting. */
function parseIntIn(
  value: string | number,
  where: string,
  min: number,
  max: number,
  shown: readonly [number, number] = [min, max],
): number {
  const n = typeof value === 'number' ? value : /^\d+$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new ConfigError(`${where}: "${value}" must be an integer between ${shown[0]} and ${shown[1]}`);
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

/** auto (null: the CPUs available) or a process count within `max`. */
function parseWorkers(value: string | number | boolean, where: string, max: number): number | null {
  if (value === 'auto') return null;
  const n =
    typeof value === 'number'
      ? value
      : typeof value === 'string' && /^\d+$/.test(value)
        ? Number(value)
        : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > max) {
    throw new ConfigError(`${where}: "${String(value)}" must be auto or an integer between 1 and ${max}`);
  }
  return n;
}

function parseBool(value: string | boolean, where: string): boolean {
  if (typeof value === 'boolean') return value;
  if (/^(1|true|yes|on)$/i.test(value)) return true;
  if (/^(0|false|no|off)$/i.test(value)) return false;
  throw new ConfigError(`${where}: "${value}" must be true or false`);
}

export type RawSettings = Partial<Record<SettingKey, string | number | boolean>>;

/** The environment variable of each setting that has one (from src/settings.ts). */
export const ENV_VARS: Partial<Record<SettingKey, string>> = Object.fromEntries(
  SETTING_ROWS.flatMap(([key, row]) => (row.env === null ? [] : [[key, row.env]])),
);

/** Parses one source's value of a setting by its row's type; `where` names the source. */
function parseValue(row: SettingRow, value: string | number | boolean, where: string): unknown {
  switch (row.type) {
    case 'store':
    case 'path': {
      if (typeof value !== 'string' || value.length === 0)
        throw new ConfigError(`${where}: must be a non-empty string`);
      const bad = row.type === 'store' ? checkStoreSpec(value) : null;
      if (bad !== null) throw new ConfigError(`${where}: ${bad}`);
      return value;
    }
    case 'namespace': {
      const problem = namespaceProblem(String(value));
      if (typeof value !== 'string' || problem !== null) throw new ConfigError(`${where}: ${problem}`);
      return value;
    }
    case 'hostport':
      if (typeof value !== 'string') throw new ConfigError(`${where}: must be "HOST:PORT"`);
      return parseHostPort(value, where);
    case 'bool':
      return parseBool(value as string | boolean, where);
    case 'int':
      // Any duration up to a day here; the row's own range is checked on the value that wins.
      return parseIntIn(value as string | number, where, 0, 86_400_000, row.range);
    case 'logLevel':
      return parseEnum(value, where, LOG_LEVELS);
    case 'logFormat':
      return parseEnum(value, where, LOG_FORMATS);
    case 'share':
      return parseAccessLog(value, where);
    case 'workers':
      return parseWorkers(value, where, row.range?.[1] ?? 1);
    case 'hosts': {
      const hosts = parseAllowedHosts(String(value));
      if (typeof hosts === 'string') throw new ConfigError(`${where}: ${hosts}`);
      return hosts;
    }
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
    if (!Object.hasOwn(SETTINGS, name))
      throw new ConfigError(`${where}: unknown setting; known: ${Object.keys(SETTINGS).join(', ')}`);
    const v = isScalar(item.value) ? item.value.value : undefined;
    if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') {
      throw new ConfigError(`${where}: must be a single value`);
    }
    out[name as SettingKey] = v;
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
  const target = cfg as unknown as Record<SettingKey, unknown>;
  // Where the value of each setting some source gave came from (the rest keep their defaults).
  const given = new Map<SettingKey, { where: string; value: string | number | boolean }>();
  const apply = (key: SettingKey, value: string | number | boolean, where: string) => {
    target[key] = parseValue(SETTINGS[key], value, where);
    given.set(key, { where, value });
  };
  if (sources.file) {
    const raw = readConfigFile(sources.file);
    for (const [key] of SETTING_ROWS) {
      const v = raw[key];
      if (v !== undefined) apply(key, v, raw.__where[key] ?? `${sources.file}: ${key}`);
    }
  }
  const env = sources.env ?? {};
  for (const [key, row] of SETTING_ROWS) {
    const v = row.env === null ? undefined : env[row.env];
    if (v !== undefined && v !== '') apply(key, v, `environment ${row.env}`);
  }
  for (const [key, v] of Object.entries(sources.flags ?? {}) as [SettingKey, string | boolean][]) {
    if (v !== undefined && Object.hasOwn(SETTINGS, key))
      apply(key, v, SETTINGS[key].flag ?? `--${flagName(key)}`);
  }
  // A Redis that may lose its state loses a hold's entry too: holds only when asked for there.
  if (cfg.allowVolatileRedis && !given.has('admissionHoldMs')) cfg.admissionHoldMs = 0;
  for (const [key, row] of SETTING_ROWS) {
    const value = target[key];
    if (row.type !== 'int' || row.range === undefined || typeof value !== 'number') continue;
    const [min, max] = row.range;
    if (value < min || value > max) {
      const from = given.get(key);
      throw new ConfigError(
        `${key} must lie between ${min} and ${max}` +
          (from === undefined ? '' : ` (${from.where}: "${String(from.value)}")`),
      );
    }
  }
  if (cfg.minTtlMs < 1 || cfg.minTtlMs > cfg.maxTtlMs)
    throw new ConfigError('minTtlMs must be ≥ 1 and ≤ maxTtlMs');
  if (cfg.defaultTtlMs < cfg.minTtlMs || cfg.defaultTtlMs > cfg.maxTtlMs) {
    throw new ConfigError('defaultTtlMs must lie between minTtlMs and maxTtlMs');
  }
  checkTlsSettings(cfg);
  return deepFreeze(cfg);
}

/**
 * The TLS settings that only make sense together: a certificate needs its key (and the
 * other way round), a client CA needs the listener to speak TLS, a store CA or client
 * certificate needs a rediss:// or etcds:// store. The files themselves are read and checked at start (src/http/tls.ts).
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
  if ((cfg.storeCert === null) !== (cfg.storeKey === null)) {
    const [given, missing] =
      cfg.storeCert === null ? (['storeKey', 'storeCert'] as const) : (['storeCert', 'storeKey'] as const);
    throw new ConfigError(
      `--${flagName(given)} needs --${flagName(missing)} (a certificate and its key go together)`,
    );
  }
  for (const key of ['storeCa', 'storeCert'] as const) {
    if (cfg[key] !== null && !/^(rediss(\+cluster)?|etcds):\/\//i.test(cfg.store)) {
      throw new ConfigError(
        `--${flagName(key)} applies to a rediss://, rediss+cluster:// or etcds:// store; for Postgres put sslmode=verify-full&sslrootcert=FILE (and sslcert=, sslkey=) in the URL`,
      );
    }
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
