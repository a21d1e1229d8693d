/**
 * The `fencegate` command: serve, check, init, epoch bump, keys, auth hash, help, --version.
 * Every command answers --help/-h (exit 0, stdout); the serve and epoch flags and their
 * help come from the settings table (src/settings.ts). Usage errors exit 2.
 * Errors that stop a command are one plain line on stderr (`fencegate: <message>`) and
 * a non-zero exit code. Once `serve` has its logger, everything it prints is a pino
 * log line (src/observe/log.ts); a start that fails then is also logged (fatal).
 */
import { parseArgs } from 'node:util';
import { AuthFileError } from './auth/file.js';
import { ConfigError, exposureProblem, resolveConfig } from './config.js';
import type { RawSettings, ServeConfig } from './config.js';
import { SETTINGS, SETTING_ROWS, describeDefault, type SettingKey, type SettingRow } from './settings.js';
import type { Logger } from './observe/log.js';
import type { WorkerRole } from './workers/ipc.js';
import { VERSION } from './version.js';

/** Usage text wraps at this width; option descriptions start at column OPTION_COLUMN. */
const WIDTH = 110;
const OPTION_COLUMN = 39;

interface OptionHelp {
  /** The flags as typed, with their values: `--tls-cert FILE --tls-key FILE`. */
  flags: string;
  text: string;
}

/**
 * The `--help` entry of settings (src/settings.ts): the flag and its value, the help, the
 * variable and the default. A row with `helpWith` takes the named row into its entry.
 */
function settingOptions(keys: readonly SettingKey[], opts: { env?: boolean } = {}): OptionHelp[] {
  const joined = new Set(keys.map((k) => SETTINGS[k] as SettingRow).flatMap((r) => r.helpWith ?? []));
  const out: OptionHelp[] = [];
  for (const key of keys) {
    if (joined.has(key)) continue;
    const lead: SettingRow = SETTINGS[key];
    const rows = [lead, ...(lead.helpWith ? [SETTINGS[lead.helpWith as SettingKey] as SettingRow] : [])];
    const flags = rows
      .filter((r) => r.flag !== null)
      .map((r) => (r.arg === null ? r.flag : `${r.flag} ${r.arg}`))
      .join(' ');
    const envs = opts.env === false ? [] : rows.flatMap((r) => r.env ?? []);
    const shown = lead.arg !== null && (lead.default !== null || lead.defaultText !== undefined);
    const text =
      lead.help +
      (envs.length > 0 ? ` [${envs.join(', ')}]` : '') +
      (shown ? ` (default ${describeDefault(lead)})` : '');
    out.push({ flags, text });
  }
  return out;
}

/** The settings `serve` takes as flags, in table order. */
const SERVE_FLAGS = SETTING_ROWS.filter(([, row]) => row.flag !== null).map(([key]) => key);
/** The settings the config file alone sets. */
const FILE_ONLY = SETTING_ROWS.filter(([, row]) => row.flag === null).map(([key]) => key);
/** The settings `epoch bump` takes as flags: how to reach the store. */
const EPOCH_FLAGS = [
  'store',
  'storeNamespace',
  'storeCa',
  'storeCert',
  'storeKey',
  'allowVolatileRedis',
] as const satisfies SettingKey[];

/** Words wrapped to WIDTH, every line but the first indented by `indent`. */
function wrap(text: string, first: number, indent: number): string[] {
  const lines: string[] = [];
  let line = '';
  let room = WIDTH - first;
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > room) {
      lines.push(line);
      line = '';
      room = WIDTH - indent;
    }
    line = line === '' ? word : `${line} ${word}`;
  }
  lines.push(line);
  return lines;
}

function renderOptions(options: OptionHelp[]): string {
  const pad = ' '.repeat(OPTION_COLUMN);
  const out: string[] = [];
  for (const { flags, text } of options) {
    const head = `  ${flags}`;
    if (head.length >= OPTION_COLUMN - 1) {
      out.push(head);
      out.push(...wrap(text, OPTION_COLUMN, OPTION_COLUMN).map((l) => pad + l));
    } else {
      const [first = '', ...more] = wrap(text, OPTION_COLUMN, OPTION_COLUMN);
      out.push(head.padEnd(OPTION_COLUMN) + first, ...more.map((l) => pad + l));
    }
  }
  return `${out.join('\n')}\n`;
}

const HELP_OPTION: OptionHelp = { flags: '-h, --help', text: 'print this help and exit' };

const SERVE_OPTIONS: OptionHelp[] = [
  ...settingOptions(SERVE_FLAGS),
  {
    flags: '--config FILE',
    text:
      'YAML file with any of these settings, by their config keys (storeTimeoutMs: 1000; docs/operations.md, ' +
      `"Settings"), and these only there: ${FILE_ONLY.join(', ')}`,
  },
];

const SERVE_NOTES = `Flags win over the environment, which wins over the config file.
Port 0 picks a free port; the addresses actually bound are logged at start (the line with
"listening data=URL control=URL", shown at every log level but silent; https:// with TLS).
SIGHUP reloads the policies, the sequencer key file, the auth file and the TLS files (docs/security.md).
Without --auth, serve refuses a non-loopback --control unless --insecure is given.
`;

/** The procedure `epoch bump` is one step of, printed with its outcome. */
const RESTORE_PROCEDURE = `Restoring a fencegate store from a backup (docs/operations.md, "Backup and restore"):
  1. stop every fencegate process that uses the store (every gateway, every worker)
  2. restore the backup (the directory, the database schema, the Redis data)
  3. fencegate epoch bump --store STORE      (this command)
  4. start the fencegate processes again
Every token issued before the bump is refused from now on, and every lease granted
before it ends: its holder is told lease-lost at its next renewal and acquires again.
`;

/** A subcommand: its synopsis lines (`usage`, what each does) and what its `--help` adds. */
interface Command {
  usage: [string, string][];
  options?: OptionHelp[];
  /** Text after the options. */
  notes?: string;
}

/** Every subcommand: `fencegate COMMAND --help` (or -h) prints its entry, the top-level help lists them all. */
export const COMMANDS: Record<string, Command> = {
  serve: {
    usage: [['serve [options]', 'run the issuer, gateway and control API']],
    options: SERVE_OPTIONS,
    notes: SERVE_NOTES,
  },
  check: {
    usage: [['check PATH...', 'validate policy files or directories; exit 1 on errors']],
    notes: 'A PATH that starts with "-" goes after "--": fencegate check -- -odd.yaml\n',
  },
  init: {
    usage: [['init [DIR]', 'write commented example policies to DIR/policies (default .); never overwrites']],
  },
  epoch: {
    usage: [
      [
        'epoch bump --store S [--force]',
        'start a new token epoch, after restoring a store backup (every fencegate process stopped ' +
          'first; docs/operations.md, "Backup and restore")',
      ],
    ],
    options: [
      ...settingOptions(['store'], { env: false }).map((o) => ({
        ...o,
        text: 'the store you restored (required)',
      })),
      ...settingOptions(EPOCH_FLAGS.slice(1)),
      {
        flags: '--force',
        text: 'bump even while gateway sessions beat on the store (their fenced writes wait out their lock-delay, every live lease ends)',
      },
    ],
    notes: RESTORE_PROCEDURE,
  },
  keys: {
    usage: [
      [
        'keys init|add|promote|prune FILE',
        'make or rotate a sequencer key file (docs/security.md): init makes one, add publishes a next key, ' +
          'promote signs with it, prune drops retired keys',
      ],
    ],
    options: [
      {
        flags: '--older-than-ms N',
        text: 'prune: only retired keys retired at least this long ago (default 3660000: the longest lease and a minute)',
      },
    ],
  },
  auth: {
    usage: [
      ['auth hash', 'make a new API key: prints the key once, then the hash for the auth file'],
      ['auth hash -', 'read a key from stdin and print its hash (docs/security.md)'],
    ],
  },
};

function usageLines(): string {
  const lines = Object.values(COMMANDS).flatMap((c) => c.usage);
  lines.push(['help [COMMAND] | --help | --version', "this help, a command's help, the version"]);
  const pad = ' '.repeat(35);
  return lines
    .flatMap(([usage, what]) => {
      const head = `  fencegate ${usage}`;
      const text = wrap(what, 35, 35);
      return head.length < 34
        ? [head.padEnd(35) + text[0], ...text.slice(1).map((l) => pad + l)]
        : [head, ...text.map((l) => pad + l)];
    })
    .join('\n');
}

const TITLE = `fencegate ${VERSION}: fencing-aware storage proxy gateway and lock issuer`;

/** What bare `fencegate` prints (on stderr): the commands. */
const USAGE = `${TITLE}

Usage:
${usageLines()}
`;

/** `fencegate --help`: the commands and the serve options. */
const HELP = `${USAGE}
serve options (environment variable in brackets):
${renderOptions(SERVE_OPTIONS)}${SERVE_NOTES}`;

/** `fencegate COMMAND --help`. */
export function commandHelp(name: string): string {
  const c = COMMANDS[name];
  if (c === undefined) throw new Error(`no command ${name}`);
  const usage = c.usage.map(([u]) => `  fencegate ${u}`).join('\n');
  const what = c.usage.map(([u, w]) => (c.usage.length > 1 ? `${u}: ${w}` : w));
  const options = renderOptions([...(c.options ?? []), HELP_OPTION]);
  const bracket = c.options?.some((o) => o.text.includes('[FENCEGATE_'))
    ? ' (environment variable in brackets)'
    : '';
  return `Usage:\n${usage}\n\n${what.flatMap((w) => wrap(w, 0, 0)).join('\n')}\n\nOptions${bracket}:\n${options}${c.notes ? `\n${c.notes}` : ''}`;
}

/** Whether the arguments ask for help (before a `--`, after which everything is an argument). */
function wantsHelp(args: string[]): boolean {
  for (const a of args) {
    if (a === '--') return false;
    if (a === '--help' || a === '-h') return true;
  }
  return false;
}

/** Node's parseArgs errors, as one line that names the flag and where the help is. */
function usageError(command: string, err: TypeError & { code: unknown }): string {
  const unknown = /^Unknown option '([^']+)'/.exec(err.message);
  const what = unknown ? `unknown option ${unknown[1] ?? ''}` : err.message;
  return `${command}: ${what}; see fencegate ${command} --help`;
}

/** The parseArgs options of settings: a string flag, or a switch for a row without a value. */
function parseOptions(keys: readonly SettingKey[]): Record<string, { type: 'string' | 'boolean' }> {
  return Object.fromEntries(
    keys.map((k) => {
      const row: SettingRow = SETTINGS[k];
      return [(row.flag ?? '').slice(2), { type: row.arg === null ? 'boolean' : 'string' }];
    }),
  );
}

/** The settings given as flags, by key (parseArgs values in, RawSettings out). */
function givenSettings(keys: readonly SettingKey[], values: Record<string, string | boolean | undefined>) {
  const flags: RawSettings = {};
  for (const k of keys) {
    const v = values[(SETTINGS[k].flag ?? '').slice(2)];
    if (v !== undefined) flags[k] = v;
  }
  return flags;
}

/** Prints `message` on stderr; a usage error exits 2, a refusal or failure 1. */
function fail(message: string, code = 2): number {
  process.stderr.write(`fencegate: ${message}\n`);
  return code;
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined) {
    process.stderr.write(
      `${USAGE}\nfencegate --help lists the serve options too; fencegate COMMAND --help tells about one.\n`,
    );
    return 2;
  }
  if (command === '--help' || command === '-h' || (command === 'help' && rest.length === 0)) {
    process.stdout.write(HELP);
    return 0;
  }
  if (command === 'help') {
    const [topic, ...more] = rest;
    if (topic === undefined || !Object.hasOwn(COMMANDS, topic) || more.length > 0)
      return fail(`help: unknown command "${rest.join(' ')}"; see fencegate --help`);
    process.stdout.write(commandHelp(topic));
    return 0;
  }
  if (Object.hasOwn(COMMANDS, command) && wantsHelp(rest)) {
    process.stdout.write(commandHelp(command));
    return 0;
  }
  if (command === '--version' || command === '-v') {
    process.stdout.write(`${VERSION}\n`);
    return 0;
  }
  try {
    switch (command) {
      case 'serve':
        return await serve(rest);
      case 'check':
        return await check(rest);
      case 'init':
        return await init(rest);
      case 'epoch':
        return await epoch(rest);
      case 'auth':
        return await authCommand(rest);
      case 'keys': {
        const { keysCommand } = await import('./sequencer/cli.js');
        return await keysCommand(rest, (line) => process.stdout.write(`${line}\n`));
      }
      default:
        return fail(`unknown command "${command}"; see fencegate --help`);
    }
  } catch (err) {
    if (err instanceof TypeError && 'code' in err && String(err.code).startsWith('ERR_PARSE_ARGS'))
      return fail(usageError(command, err));
    if (
      err instanceof ConfigError ||
      err instanceof AuthFileError ||
      (err instanceof TypeError && 'code' in err)
    )
      return fail(err.message);
    if (err instanceof Error && err.name === 'TlsFileError') return fail(err.message);
    if (err instanceof Error && ['SequencerKeyError', 'TypeError'].includes(err.name) && command === 'keys')
      return fail(err.message);
    if (command === 'keys' && (err as NodeJS.ErrnoException).code === 'EEXIST')
      return fail('the key file exists already; init never overwrites keys');
    throw err;
  }
}

async function serve(args: string[]): Promise<number> {
  const worker = await workerRole();
  if (worker !== null) return serveAsWorker(worker);
  const { values, positionals } = parseArgs({
    args,
    strict: true,
    allowPositionals: true,
    options: { ...parseOptions(SERVE_FLAGS), config: { type: 'string' } },
  });
  if (positionals.length > 0) return fail(`serve takes no arguments, got "${positionals[0]}"`);
  const flags = givenSettings(SERVE_FLAGS, values);
  const config = resolveConfig({
    file: typeof values.config === 'string' ? values.config : undefined,
    env: process.env,
    flags,
  });
  const exposed = exposureProblem(config);
  if (exposed !== null) return fail(exposed);

  const { createLogger, defaultLogFormat, lifecycleLogger } = await import('./observe/log.js');
  const root = createLogger({ level: config.logLevel, format: config.logFormat ?? defaultLogFormat() });
  const { workerCount } = await import('./workers/plan.js');
  const workers = workerCount(config);
  // With workers, every line says which process wrote it: 0 for the primary, 1…N for the workers.
  const logger = workers > 1 ? root.child({ worker: 0 }) : root;
  const lifecycle = lifecycleLogger(logger);
  let server: {
    data: string;
    control: string;
    health: string | null;
    sample: string | null;
    hup(): void;
    close(): Promise<number>;
  };
  try {
    server =
      workers > 1 ? await startWithWorkers(config, logger, workers) : await startSingle(config, logger);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    lifecycle.fatal({ err }, `could not start: ${message}`);
    return fail(message);
  }
  const { data, control, health, sample } = server;
  lifecycle.info(
    { data, control, health, sample },
    `listening data=${data} control=${control}${health ? ` health=${health}` : ''}${sample ? ` sample=${sample}` : ''}`,
  );
  const code = await new Promise<number>((resolve) => {
    const stop = (signal: string) => {
      lifecycle.info({ signal }, `${signal}: shutting down`);
      process.off('SIGTERM', onTerm);
      process.off('SIGINT', onInt);
      process.off('SIGHUP', onHup);
      void server.close().then(resolve);
    };
    const onTerm = () => stop('SIGTERM');
    const onInt = () => stop('SIGINT');
    const onHup = () => server.hup();
    process.on('SIGTERM', onTerm);
    process.on('SIGINT', onInt);
    process.on('SIGHUP', onHup);
  });
  lifecycle.info({ exitCode: code }, 'stopped');
  return code;
}

/** The role of a process forked by `serve --workers` (node:cluster), or null for the process a user started. */
async function workerRole(): Promise<WorkerRole | null> {
  const { default: cluster } = await import('node:cluster');
  const { WORKER_ROLE_ENV } = await import('./workers/ipc.js');
  const role = process.env[WORKER_ROLE_ENV];
  if (!cluster.isWorker || role === undefined) return null;
  return JSON.parse(role) as WorkerRole;
}

/**
 * A worker forked by `serve --workers N`: the primary resolved the config (passed in the
 * role) and prints the lines a user reads; the worker's lines carry its slot as `worker`.
 */
async function serveAsWorker(role: WorkerRole): Promise<number> {
  const { createLogger, defaultLogFormat } = await import('./observe/log.js');
  const { config } = role;
  const root = createLogger({ level: config.logLevel, format: config.logFormat ?? defaultLogFormat() });
  const { runWorker } = await import('./workers/worker.js');
  const code = await runWorker(role, root.child({ worker: role.slot }));
  // Drained and closed, its last events sent: the open IPC channel alone would keep it alive.
  process.exit(code);
}

async function startSingle(config: Readonly<ServeConfig>, logger: Logger) {
  const { startServer } = await import('./serve.js');
  const server = await startServer(config, logger);
  return {
    ...server,
    hup() {
      server.reloadTls('SIGHUP');
      void server.reload('SIGHUP');
      void server.sequencerKeys?.reload();
      server.reloadAuth();
    },
    close: () => server.close().then(() => 0),
  };
}

async function startWithWorkers(config: Readonly<ServeConfig>, logger: Logger, count: number) {
  const { startPrimary } = await import('./workers/primary.js');
  const primary = await startPrimary(config, logger, count);
  return { ...primary, hup: () => void primary.reload('SIGHUP') };
}

/** `fencegate auth hash [-]`: a new key and its hash, or the hash of a key read from stdin. */
async function authCommand(args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, strict: true, allowPositionals: true, options: {} });
  const [sub, source, ...extra] = positionals;
  if (sub !== 'hash' || extra.length > 0 || (source !== undefined && source !== '-'))
    return fail('usage: fencegate auth hash [-]   (- reads the key from stdin)');
  const { apiKeyProblem, generateApiKey, hashApiKey } = await import('./auth/keys.js');
  if (source === undefined) {
    const { key, hash } = await generateApiKey();
    process.stdout.write(
      `key:  ${key}\nhash: ${hash}\n` +
        "Give the key to the client (it is shown only this once); put the hash under a principal's keys in the auth file.\n",
    );
    return 0;
  }
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const key = Buffer.concat(chunks)
    .toString('utf8')
    .replace(/\r?\n$/, '');
  const problem = apiKeyProblem(key);
  if (problem !== null) return fail(problem);
  process.stdout.write(`${await hashApiKey(key)}\n`);
  return 0;
}

async function check(args: string[]): Promise<number> {
  const { positionals: paths } = parseArgs({ args, strict: true, allowPositionals: true, options: {} });
  if (paths.length === 0) return fail('check needs at least one policy file or directory');
  const { loadPolicies, formatPolicyError } = await import('./policies.js');
  let bad = 0;
  for (const p of paths) {
    const r = await loadPolicies(p);
    if (r.ok) {
      process.stdout.write(`${p}: ok (${r.policy.routes.length} routes)\n`);
    } else {
      bad += r.errors.length;
      for (const e of r.errors) process.stderr.write(`${formatPolicyError(e)}\n`);
    }
  }
  return bad > 0 ? 1 : 0;
}

async function init(args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, strict: true, allowPositionals: true, options: {} });
  if (positionals.length > 1) return fail('usage: fencegate init [DIR]');
  const { scaffold, describeInit } = await import('./init.js');
  const result = await scaffold(positionals[0] ?? '.');
  const text = describeInit(result);
  process.stdout.write(text.stdout);
  process.stderr.write(text.stderr);
  return result.ok ? 0 : 1;
}

async function epoch(args: string[]): Promise<number> {
  const parsed = parseArgs({
    args,
    strict: true,
    allowPositionals: true,
    options: { ...parseOptions(EPOCH_FLAGS), force: { type: 'boolean' } },
  });
  const { positionals } = parsed;
  const values = parsed.values as Record<string, string | boolean | undefined>;
  if (positionals[0] !== 'bump' || positionals.length !== 1)
    return fail('usage: fencegate epoch bump --store STORE [--force]');
  // The store is named, never defaulted: a bump acts on one existing store (a typo must not
  // create another and report success).
  if (values.store === undefined || values.store === '')
    return fail('epoch bump: --store is required (the store you restored)');
  // An empty --store-namespace, --store-ca, --store-cert or --store-key is as if not given.
  const given = Object.entries(givenSettings(EPOCH_FLAGS, values)).filter(([, v]) => v !== '');
  const config = resolveConfig({ env: process.env, flags: Object.fromEntries(given) });
  const { openStore, redactStoreSpec } = await import('./store/index.js');
  const { readStoreTls } = await import('./http/tls.js');
  const where = redactStoreSpec(config.store);
  const options = {
    mustExist: true,
    allowVolatileRedis: config.allowVolatileRedis,
    ...(config.storeNamespace ? { namespace: config.storeNamespace } : {}),
    ...readStoreTls(config),
  };
  let store;
  try {
    store = await openStore(config.store, options);
  } catch (err) {
    return fail(`epoch bump: ${err instanceof Error ? err.message : String(err)}`, 1);
  }
  try {
    if (values.force !== true) {
      const live = await liveGatewaySessions(store);
      if (live > 0) {
        process.stderr.write(RESTORE_PROCEDURE);
        return fail(
          `epoch bump: ${live} gateway session(s) are beating on ${where}: fencegate ` +
            'processes still use this store. Stop them first (step 1), or pass --force to bump under them ' +
            '(their fenced writes then wait out their lock-delay, and every live lease ends)',
          1,
        );
      }
    }
    const e = await store.bumpEpoch();
    process.stdout.write(
      `new epoch ${e.id} on ${where}: every token from now on is above ${e.floor.toString()}\n\n`,
    );
    process.stdout.write(RESTORE_PROCEDURE);
    return 0;
  } finally {
    await store.close();
  }
}

/**
 * Gateway sessions of the store that beat while we watch (a process that uses it): read
 * twice, a third of the longest session TTL apart (sessions beat every sixth of theirs).
 */
async function liveGatewaySessions(store: import('./store/types.js').Store): Promise<number> {
  const first = await store.readSessions(null);
  if (first.size === 0) return 0;
  const wait = Math.min(10_000, Math.max(...[...first.values()].map((s) => s.ttlMs)) / 3);
  await new Promise((r) => setTimeout(r, wait));
  const second = await store.readSessions([...first.keys()]);
  let live = 0;
  for (const [id, s] of second) if (first.get(id)?.beat !== s.beat) live += 1;
  return live;
}
