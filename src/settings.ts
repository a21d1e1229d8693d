/**
 * The settings of `fencegate serve`, one row each: its config-file key (the row's name),
 * flag, environment variable, type, default, range and help text. Everything else is
 * derived from this table: the ServeConfig type and config resolution (src/config.ts),
 * the parseArgs options, flag mapping and `--help` of the commands (src/cli.ts), and the
 * settings table in docs/operations.md (`npm run docs:settings`, held to this file by
 * test/unit/config-settings.test.ts). A new setting is one row here plus where it is used;
 * rules between settings (minTtlMs ≤ maxTtlMs, a certificate needs its key) stay in
 * src/config.ts.
 */
import { ADMISSION_HOLD_MS } from './gateway/admission-hold.js';
import { DEFAULT_LOCK_RETENTION_MS } from './store/lmdb/retire.js';
import { LOG_FORMATS, LOG_LEVELS, type LogFormat, type LogLevel } from './observe/log.js';

export interface HostPort {
  host: string;
  port: number;
}

/** What each type of setting holds once parsed (src/config.ts parses them). */
interface KindValue {
  /** A store: a directory, postgres://…, redis://…, redis+cluster://… or etcd://… (a known scheme). */
  store: string;
  /** A non-empty string, mostly a file or directory. */
  path: string;
  /** A Redis key prefix or Postgres schema name. */
  namespace: string;
  /** HOST:PORT, [IPv6]:PORT or :PORT; port 0 picks a free port. */
  hostport: HostPort;
  /** true|false (also 1|0, yes|no, on|off); a switch on the command line. */
  bool: boolean;
  /** A whole number (of ms) within the row's range. */
  int: number;
  logLevel: LogLevel;
  logFormat: LogFormat;
  /** on (1), off (0), or a fraction between 0 and 1. */
  share: number;
  /** auto (null) or a count within the row's range. */
  workers: number | null;
  /** Comma-separated host names and IP addresses (src/http/allowed-hosts.ts), or *. */
  hosts: readonly string[];
}

export type Kind = keyof KindValue;

interface RowOf<K extends Kind> {
  /** The command-line flag; null: config file only. */
  readonly flag: `--${string}` | null;
  /** The environment variable; null: none. */
  readonly env: `FENCEGATE_${string}` | null;
  readonly type: K;
  /** null: not set (what that means is in defaultText). */
  readonly default: KindValue[K] | null;
  /** How --help and the docs show the default, when its value alone does not say. */
  readonly defaultText?: string;
  /** Inclusive bounds of an int or workers setting, checked on the value that wins. */
  readonly range?: readonly [number, number];
  /** What an int setting counts, as the docs show it: milliseconds unless said. */
  readonly unit?: 'ms' | 'count';
  /** The flag's value as --help shows it (FILE, N, HOST:PORT); null: a switch, no value. */
  readonly arg: string | null;
  /** One line (--help wraps it). */
  readonly help: string;
  /** --help shows this row and the named one as one entry (a certificate and its key). */
  readonly helpWith?: string;
}

export type SettingRow = { [K in Kind]: RowOf<K> }[Kind];

/** The most worker processes `--workers` accepts. */
export const MAX_WORKERS = 256;

/** A duration setting's bounds, unless its row says otherwise: 0 to a day. */
const MS: readonly [number, number] = [0, 86_400_000];

export const SETTINGS = {
  store: {
    flag: '--store',
    env: 'FENCEGATE_STORE',
    type: 'store',
    default: './.fencegate',
    defaultText: './.fencegate, embedded',
    arg: 'DIR|postgres://…|redis://…|redis+cluster://…|etcd://…',
    help: 'lock and fence store',
  },
  storeNamespace: {
    flag: '--store-namespace',
    env: 'FENCEGATE_STORE_NAMESPACE',
    type: 'namespace',
    default: null,
    defaultText: 'fg / fencegate',
    arg: 'NAME',
    help: 'Redis key prefix / Postgres schema / etcd key prefix; lets several deployments share one server',
  },
  listen: {
    flag: '--listen',
    env: 'FENCEGATE_LISTEN',
    type: 'hostport',
    default: { host: '127.0.0.1', port: 8080 },
    arg: 'HOST:PORT',
    help: 'data listener, the proxy',
  },
  control: {
    flag: '--control',
    env: 'FENCEGATE_CONTROL',
    type: 'hostport',
    default: { host: '127.0.0.1', port: 9090 },
    arg: 'HOST:PORT',
    help: 'issuer API, /metrics, /healthz, /readyz',
  },
  auth: {
    flag: '--auth',
    env: 'FENCEGATE_AUTH',
    type: 'path',
    default: null,
    defaultText: 'none: no credentials',
    arg: 'FILE',
    help: 'principals, API key hashes, client certificates and grants (YAML or JSON) for the control listener',
  },
  health: {
    flag: '--health',
    env: 'FENCEGATE_HEALTH',
    type: 'hostport',
    default: null,
    defaultText: 'none: they are on the control listener',
    arg: 'HOST:PORT',
    help: 'probe listener: /healthz, /readyz, /metrics without credentials',
  },
  /** src/http/allowed-hosts.ts; null: loopback names only without --auth, no check with it. */
  allowedHosts: {
    flag: '--allowed-hosts',
    env: 'FENCEGATE_ALLOWED_HOSTS',
    type: 'hosts',
    default: null,
    defaultText: 'without --auth: localhost, loopback IPs and the bind address; with --auth: any',
    arg: 'HOST,…',
    help: 'the Host names the control listener and dashboard answer for (DNS rebinding); * for any',
  },
  controlMaxConnections: {
    flag: '--control-max-connections',
    env: 'FENCEGATE_CONTROL_MAX_CONNECTIONS',
    type: 'int',
    default: 1_024,
    range: [16, 1_000_000],
    unit: 'count',
    arg: 'N',
    help: 'open connections the control listener takes at most; more are closed at once',
  },
  eventStreamsMax: {
    flag: '--event-streams-max',
    env: 'FENCEGATE_EVENT_STREAMS_MAX',
    type: 'int',
    default: 64,
    range: [0, 100_000],
    unit: 'count',
    arg: 'N',
    help: 'event streams (GET /v1/events/stream) open at once at most; more get 429 too-many-streams',
  },
  eventStreamsPerPrincipal: {
    flag: '--event-streams-per-principal',
    env: 'FENCEGATE_EVENT_STREAMS_PER_PRINCIPAL',
    type: 'int',
    default: 8,
    range: [0, 100_000],
    unit: 'count',
    arg: 'N',
    help: 'with --auth: event streams one principal may have open at once',
  },
  insecure: {
    flag: '--insecure',
    env: 'FENCEGATE_INSECURE',
    type: 'bool',
    default: false,
    arg: null,
    help: 'serve the control listener without --auth on a non-loopback address (anyone who reaches it can take any lock)',
  },
  policies: {
    flag: '--policies',
    env: 'FENCEGATE_POLICIES',
    type: 'path',
    default: './policies',
    arg: 'DIR|FILE',
    help: 'policy YAML',
  },
  /** serve --workers: docs/adr/0008-workers.md; null: os.availableParallelism(). 1 runs everything in one process. */
  workers: {
    flag: '--workers',
    env: 'FENCEGATE_WORKERS',
    type: 'workers',
    default: null,
    defaultText: 'auto: the CPUs available',
    range: [1, MAX_WORKERS],
    arg: 'N|auto',
    help: 'processes sharing the data listener and the store; 1 runs one process',
  },
  sample: {
    flag: '--sample',
    env: 'FENCEGATE_SAMPLE',
    type: 'hostport',
    default: null,
    arg: 'HOST:PORT',
    help: 'also run the sample "orders" upstream (for the demo)',
  },
  allowVolatileRedis: {
    flag: '--allow-volatile-redis',
    env: 'FENCEGATE_ALLOW_VOLATILE_REDIS',
    type: 'bool',
    default: false,
    arg: null,
    help: 'start on a Redis without AOF appendfsync always (unsafe); admission holds are then off unless set',
  },
  defaultTtlMs: {
    flag: null,
    env: null,
    type: 'int',
    default: 10_000,
    range: MS,
    arg: 'N',
    help: 'the lease TTL of an acquire that gives none; between minTtlMs and maxTtlMs',
  },
  minTtlMs: {
    flag: null,
    env: null,
    type: 'int',
    default: 100,
    range: MS,
    arg: 'N',
    help: 'the shortest lease TTL an acquire may ask for; at least 1',
  },
  maxTtlMs: {
    flag: null,
    env: null,
    type: 'int',
    default: 3_600_000,
    range: MS,
    arg: 'N',
    help: 'the longest lease TTL an acquire may ask for',
  },
  maxWaitMs: {
    flag: null,
    env: null,
    type: 'int',
    default: 300_000,
    range: MS,
    arg: 'N',
    help: 'the longest an acquire may wait in a lock queue',
  },
  /** docs/issuer.md, "Several locks at once". */
  refuseLockOrder: {
    flag: '--refuse-lock-order',
    env: 'FENCEGATE_REFUSE_LOCK_ORDER',
    type: 'bool',
    default: false,
    arg: null,
    help: 'refuse (409 lock-order) an acquire by an owner that holds a lock sorting after it; off: only counted',
  },
  storeTimeoutMs: {
    flag: '--store-timeout-ms',
    env: 'FENCEGATE_STORE_TIMEOUT_MS',
    type: 'int',
    default: 2_000,
    range: [10, 60_000],
    arg: 'N',
    help: 'a fenced write whose store call takes longer gets 503',
  },
  storeResetTimeoutMs: {
    flag: '--store-reset-timeout-ms',
    env: 'FENCEGATE_STORE_RESET_TIMEOUT_MS',
    type: 'int',
    default: 5_000,
    range: [100, 3_600_000],
    arg: 'N',
    help: "how long the store's open circuit refuses fenced writes before one trial call goes through",
  },
  sessionTtlMs: {
    flag: '--session-ttl-ms',
    env: 'FENCEGATE_SESSION_TTL_MS',
    type: 'int',
    default: 6_000,
    range: [300, 600_000],
    arg: 'N',
    help: "how long other gateways wait on this one's silent session before dropping its in-flight writes at the drain barrier",
  },
  /** docs/stores-embedded.md, "Retiring idle locks". */
  lockRetentionMs: {
    flag: '--lock-retention-ms',
    env: 'FENCEGATE_LOCK_RETENTION_MS',
    type: 'int',
    default: DEFAULT_LOCK_RETENTION_MS,
    range: [1_000, 2_592_000_000],
    arg: 'N',
    help: "embedded store: how long an unused lock's record is kept before it is deleted (its tokens stay refused)",
  },
  admissionHoldMs: {
    flag: '--admission-hold-ms',
    env: 'FENCEGATE_ADMISSION_HOLD_MS',
    type: 'int',
    default: ADMISSION_HOLD_MS,
    range: [0, 1_000],
    arg: 'N',
    help: "how long one store admission serves the same token's next writes on a lock in this process; 0: every write asks the store",
  },
  /** docs/gateway.md, "The refusal lane". */
  refusalLane: {
    flag: '--refusal-lane',
    env: 'FENCEGATE_REFUSAL_LANE',
    type: 'bool',
    default: true,
    defaultText: 'on',
    arg: 'on|off',
    help: "answer refusals that need no waiting (a stale flood's) before Node's HTTP server reads them",
  },
  /** JSON (fencegate keys init); null: the embedded store's file, made on first start; no sequencers on other stores. */
  sequencerKeys: {
    flag: '--sequencer-keys',
    env: 'FENCEGATE_SEQUENCER_KEYS',
    type: 'path',
    default: null,
    defaultText: "sequencer-keys.json in the embedded store's directory, none on Postgres/Redis",
    arg: 'FILE',
    help: 'sequencer key file (fencegate keys init), the same for every process on the store',
  },
  /** src/sequencer/keyring.ts: a key file group or others may read is refused unless this is set. */
  allowReadableKeyFile: {
    flag: '--allow-readable-key-file',
    env: 'FENCEGATE_ALLOW_READABLE_KEY_FILE',
    type: 'bool',
    default: false,
    arg: null,
    help: 'load a sequencer key file that group or others may read (warned at start) instead of refusing it',
  },
  /** Data listener TLS: certificate chain and key, both or neither (src/config.ts checks); null: plain HTTP. */
  tlsCert: {
    flag: '--tls-cert',
    env: 'FENCEGATE_TLS_CERT',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: 'serve the data listener over HTTPS with this certificate chain and key (PEM); re-read on SIGHUP',
    helpWith: 'tlsKey',
  },
  tlsKey: {
    flag: '--tls-key',
    env: 'FENCEGATE_TLS_KEY',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: "the private key of --tls-cert's certificate (PEM); re-read on SIGHUP",
  },
  tlsClientCa: {
    flag: '--tls-client-ca',
    env: 'FENCEGATE_TLS_CLIENT_CA',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: 'data listener mTLS: refuse clients without a certificate from this CA',
  },
  controlTlsCert: {
    flag: '--control-tls-cert',
    env: 'FENCEGATE_CONTROL_TLS_CERT',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: 'the same for the control listener (its own files: no fallback between listeners)',
    helpWith: 'controlTlsKey',
  },
  controlTlsKey: {
    flag: '--control-tls-key',
    env: 'FENCEGATE_CONTROL_TLS_KEY',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: "the private key of --control-tls-cert's certificate (PEM)",
  },
  controlTlsClientCa: {
    flag: '--control-tls-client-ca',
    env: 'FENCEGATE_CONTROL_TLS_CLIENT_CA',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: 'control listener mTLS',
  },
  upstreamCa: {
    flag: '--upstream-ca',
    env: 'FENCEGATE_UPSTREAM_CA',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: 'CA bundle trusted (besides the built-in roots) by https upstreams without their own tls.ca in the policy; re-read on SIGHUP',
  },
  storeCa: {
    flag: '--store-ca',
    env: 'FENCEGATE_STORE_CA',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: "CA bundle a rediss:// or etcds:// store's certificate must chain to (Postgres: sslmode=verify-full&sslrootcert=FILE in the URL)",
  },
  /** Store mTLS: the client certificate chain and key fencegate presents to a rediss:// or etcds:// store. */
  storeCert: {
    flag: '--store-cert',
    env: 'FENCEGATE_STORE_CERT',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: 'the client certificate chain (PEM) presented to a rediss:// or etcds:// store that asks for one (Redis tls-auth-clients, etcd --client-cert-auth)',
    helpWith: 'storeKey',
  },
  storeKey: {
    flag: '--store-key',
    env: 'FENCEGATE_STORE_KEY',
    type: 'path',
    default: null,
    arg: 'FILE',
    help: "the private key of --store-cert's certificate (PEM)",
  },
  logLevel: {
    flag: '--log-level',
    env: 'FENCEGATE_LOG_LEVEL',
    type: 'logLevel',
    default: 'info',
    arg: 'LEVEL',
    help: `the least severe level logged: ${LOG_LEVELS.join('|')}`,
  },
  logFormat: {
    flag: '--log-format',
    env: 'FENCEGATE_LOG_FORMAT',
    type: 'logFormat',
    default: null,
    defaultText: 'pretty when stdout is a terminal, else json',
    arg: LOG_FORMATS.join('|'),
    help: 'one JSON object per line, or readable',
  },
  /** Share of data-listener requests written to the access log: 0 (off) to 1 (every one). */
  accessLog: {
    flag: '--access-log',
    env: 'FENCEGATE_ACCESS_LOG',
    type: 'share',
    default: 1,
    defaultText: 'on',
    arg: 'on|off|FRACTION',
    help: 'a log line per data-listener request at info; a fraction such as 0.01 logs that share of them',
  },
} as const satisfies Record<string, SettingRow>;

type Settings = typeof SETTINGS;
export type SettingKey = keyof Settings;

/** The value of every setting once resolved: the type of a row's values, or null when its default is. */
export type SettingValues = {
  -readonly [K in SettingKey]:
    KindValue[Settings[K]['type']] | (null extends Settings[K]['default'] ? null : never);
};

/** The rows in table order, typed loosely for code that walks them all. */
export const SETTING_ROWS = Object.entries(SETTINGS) as [SettingKey, SettingRow][];

export function settingRow(key: SettingKey): SettingRow {
  return SETTINGS[key];
}

/** A row's default as --help and the docs show it. */
export function describeDefault(row: SettingRow): string {
  if (row.defaultText !== undefined) return row.defaultText;
  const d = row.default;
  if (d === null) return 'none';
  if (Array.isArray(d)) return d.join(',');
  if (typeof d === 'object' && 'host' in d) return `${d.host}:${d.port}`;
  return String(d);
}

/** The values a row takes, as the docs show them. */
export function describeValues(row: SettingRow): string {
  switch (row.type) {
    case 'int':
      return `${row.arg ?? 'N'}: ${row.range?.[0] ?? 0}–${row.range?.[1] ?? ''}${row.unit === 'count' ? '' : ' ms'}`;
    case 'workers':
      return `auto or ${row.range?.[0] ?? 1}–${row.range?.[1] ?? MAX_WORKERS}`;
    case 'bool':
      return row.arg === null ? 'true|false (flag: no value)' : `${row.arg} (or true|false)`;
    case 'share':
      return 'on|off or a fraction 0–1';
    case 'hosts':
      return 'host names, IP addresses, comma-separated; or *';
    case 'logLevel':
      return LOG_LEVELS.join('|');
    case 'logFormat':
      return LOG_FORMATS.join('|');
    default:
      return row.arg ?? '';
  }
}

/** The markers in docs/operations.md between which `npm run docs:settings` writes the table. */
export const DOCS_BEGIN = '<!-- settings:begin (generated from src/settings.ts by npm run docs:settings) -->';
export const DOCS_END = '<!-- settings:end -->';

export const DOCS_HEADER = ['config key', 'flag', 'environment', 'values', 'default', 'what'] as const;

/** The docs table's cells, row by row, before Markdown escaping (the test compares these). */
export function docsCells(): string[][] {
  return SETTING_ROWS.map(([key, row]) => [
    key,
    row.flag === null ? '' : row.arg === null ? row.flag : `${row.flag} ${row.arg}`,
    row.env ?? '',
    describeValues(row),
    describeDefault(row),
    row.help,
  ]);
}

/** The settings table as Markdown (one line per row; prettier aligns it in the docs). */
export function docsTable(): string {
  const code = (s: string) => (s === '' ? '' : `\`${s}\``);
  const cell = (s: string) => s.replace(/\|/g, '\\|');
  const lines = [
    `| ${DOCS_HEADER.join(' | ')} |`,
    `| ${DOCS_HEADER.map(() => '---').join(' | ')} |`,
    ...docsCells().map(
      ([key, flag, env, values, dflt, help]) =>
        `| ${[code(key ?? ''), code(flag ?? ''), code(env ?? ''), values, dflt, help].map((c) => cell(c ?? '')).join(' | ')} |`,
    ),
  ];
  return `${lines.join('\n')}\n`;
}
