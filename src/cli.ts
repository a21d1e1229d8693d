/**
 * The `fencegate` command: serve, check, init, epoch bump, --help, --version.
 * Errors that stop a command are one plain line on stderr (`fencegate: <message>`) and
 * a non-zero exit code. Once `serve` has its logger, everything it prints is a pino
 * log line (src/observe/log.ts); a start that fails then is also logged (fatal).
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { AuthFileError } from './auth/file.js';
import { ConfigError, exposureProblem, resolveConfig } from './config.js';
import type { RawSettings, ServeConfig } from './config.js';
import type { Logger } from './observe/log.js';
import type { WorkerRole } from './workers/ipc.js';

const VERSION = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

const HELP = `fencegate ${VERSION}: fencing-aware storage proxy gateway and lock issuer

Usage:
  fencegate serve [options]      run the issuer, gateway and control API
  fencegate check PATH...        validate policy files or directories; exit 1 on errors
  fencegate init [DIR]           write commented example policies to DIR/policies (default .); never overwrites
  fencegate epoch bump --store S [--force]   start a new token epoch, after restoring a store backup
                                 (every fencegate process stopped first; docs/operations.md, "Backup and restore")
  fencegate keys init|add|promote|prune FILE   make or rotate a sequencer key file (docs/security.md)
  fencegate auth hash            make a new API key: prints the key once, then the hash for the auth file
  fencegate auth hash -          read a key from stdin and print its hash (docs/security.md)
  fencegate --help | --version

serve options (environment variable in brackets):
  --store DIR|postgres://…|redis://…   lock and fence store [FENCEGATE_STORE] (default ./.fencegate, embedded)
  --store-namespace NAME               Redis key prefix / Postgres schema [FENCEGATE_STORE_NAMESPACE] (default fg / fencegate)
  --listen HOST:PORT                   data listener, the proxy [FENCEGATE_LISTEN] (default 127.0.0.1:8080)
  --control HOST:PORT                  issuer API, /metrics, /healthz, /readyz [FENCEGATE_CONTROL] (default 127.0.0.1:9090)
  --auth FILE                          principals, API key hashes, client certificates and grants (YAML or JSON)
                                       for the control listener [FENCEGATE_AUTH] (default: none, no credentials)
  --health HOST:PORT                   probe listener: /healthz, /readyz, /metrics without credentials
                                       [FENCEGATE_HEALTH] (default: none; they are on the control listener)
  --insecure                           serve the control listener without --auth on a non-loopback address
                                       (anyone who reaches it can take any lock) [FENCEGATE_INSECURE]
  --policies DIR|FILE                  policy YAML [FENCEGATE_POLICIES] (default ./policies)
  --config FILE                        YAML file with any of these settings
  --workers N|auto                     processes sharing the data listener and the store; 1 runs one process
                                       [FENCEGATE_WORKERS] (default auto: the CPUs available)
  --sample HOST:PORT                   also run the sample "orders" upstream (for the demo) [FENCEGATE_SAMPLE]
  --allow-volatile-redis               start on a Redis without AOF appendfsync always (unsafe) [FENCEGATE_ALLOW_VOLATILE_REDIS]
  --store-timeout-ms N                 a fenced write whose store call takes longer gets 503 [FENCEGATE_STORE_TIMEOUT_MS] (default 2000)
  --store-reset-timeout-ms N           how long the store's open circuit refuses fenced writes [FENCEGATE_STORE_RESET_TIMEOUT_MS] (default 5000)
  --session-ttl-ms N                   how long other gateways wait on this one's silent session before dropping
                                       its in-flight writes at the drain barrier [FENCEGATE_SESSION_TTL_MS] (default 6000)
  --admission-hold-ms N                how long one store admission serves the same token's next writes on a lock
                                       in this process; 0: every write asks the store [FENCEGATE_ADMISSION_HOLD_MS] (default 50)
  --refusal-lane on|off                answer refusals that need no waiting (a stale flood's) before Node's HTTP
                                       server reads them [FENCEGATE_REFUSAL_LANE] (default on)
  --sequencer-keys FILE                sequencer key file, the same for every process on the store
                                       [FENCEGATE_SEQUENCER_KEYS] (default: <dir>/sequencer-keys.json on the
                                       embedded store, none on Postgres/Redis)
  --tls-cert FILE --tls-key FILE       serve the data listener over HTTPS with this certificate chain and key (PEM)
                                       [FENCEGATE_TLS_CERT, FENCEGATE_TLS_KEY]; re-read on SIGHUP
  --tls-client-ca FILE                 data listener mTLS: refuse clients without a certificate from this CA
                                       [FENCEGATE_TLS_CLIENT_CA]
  --control-tls-cert FILE --control-tls-key FILE
                                       the same for the control listener [FENCEGATE_CONTROL_TLS_CERT, FENCEGATE_CONTROL_TLS_KEY]
  --control-tls-client-ca FILE         control listener mTLS [FENCEGATE_CONTROL_TLS_CLIENT_CA]
  --upstream-ca FILE                   CA bundle trusted (besides the built-in roots) by https upstreams without
                                       their own tls.ca in the policy [FENCEGATE_UPSTREAM_CA]; re-read on SIGHUP
  --store-ca FILE                      CA bundle a rediss:// store's certificate must chain to [FENCEGATE_STORE_CA]
                                       (Postgres: sslmode=verify-full&sslrootcert=FILE in the URL)
  --log-level LEVEL                    fatal|error|warn|info|debug|trace|silent [FENCEGATE_LOG_LEVEL] (default info)
  --log-format json|pretty             one JSON object per line, or readable [FENCEGATE_LOG_FORMAT]
                                       (default pretty when stdout is a terminal, else json)
  --access-log on|off|FRACTION         a log line per data-listener request at info; a fraction such as
                                       0.01 logs that share of them [FENCEGATE_ACCESS_LOG] (default on)
Port 0 picks a free port; the addresses actually bound are logged at start (the line with
"listening data=URL control=URL", shown at every log level but silent; https:// with TLS).
SIGHUP reloads the policies, the sequencer key file, the auth file and the TLS files (docs/security.md).
Without --auth, serve refuses a non-loopback --control unless --insecure is given.
`;

/** Prints `message` on stderr; a usage error exits 2, a refusal or failure 1. */
function fail(message: string, code = 2): number {
  process.stderr.write(`fencegate: ${message}\n`);
  return code;
}

export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(HELP);
    return command === undefined ? 2 : 0;
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
    options: {
      store: { type: 'string' },
      'store-namespace': { type: 'string' },
      listen: { type: 'string' },
      control: { type: 'string' },
      policies: { type: 'string' },
      config: { type: 'string' },
      sample: { type: 'string' },
      'allow-volatile-redis': { type: 'boolean' },
      'store-timeout-ms': { type: 'string' },
      'store-reset-timeout-ms': { type: 'string' },
      'session-ttl-ms': { type: 'string' },
      'admission-hold-ms': { type: 'string' },
      'refusal-lane': { type: 'string' },
      'sequencer-keys': { type: 'string' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      'tls-client-ca': { type: 'string' },
      'control-tls-cert': { type: 'string' },
      'control-tls-key': { type: 'string' },
      'control-tls-client-ca': { type: 'string' },
      'upstream-ca': { type: 'string' },
      'store-ca': { type: 'string' },
      'log-level': { type: 'string' },
      'log-format': { type: 'string' },
      'access-log': { type: 'string' },
      auth: { type: 'string' },
      health: { type: 'string' },
      insecure: { type: 'boolean' },
      workers: { type: 'string' },
    },
  });
  if (positionals.length > 0) return fail(`serve takes no arguments, got "${positionals[0]}"`);
  const flags: RawSettings = {
    store: values.store,
    storeNamespace: values['store-namespace'],
    listen: values.listen,
    control: values.control,
    policies: values.policies,
    sample: values.sample,
    allowVolatileRedis: values['allow-volatile-redis'],
    storeTimeoutMs: values['store-timeout-ms'],
    storeResetTimeoutMs: values['store-reset-timeout-ms'],
    sessionTtlMs: values['session-ttl-ms'],
    admissionHoldMs: values['admission-hold-ms'],
    refusalLane: values['refusal-lane'],
    sequencerKeys: values['sequencer-keys'],
    tlsCert: values['tls-cert'],
    tlsKey: values['tls-key'],
    tlsClientCa: values['tls-client-ca'],
    controlTlsCert: values['control-tls-cert'],
    controlTlsKey: values['control-tls-key'],
    controlTlsClientCa: values['control-tls-client-ca'],
    upstreamCa: values['upstream-ca'],
    storeCa: values['store-ca'],
    logLevel: values['log-level'],
    logFormat: values['log-format'],
    accessLog: values['access-log'],
    auth: values.auth,
    health: values.health,
    insecure: values.insecure,
    workers: values.workers,
  };
  for (const k of Object.keys(flags) as (keyof RawSettings)[]) if (flags[k] === undefined) delete flags[k];
  const config = resolveConfig({ file: values.config, env: process.env, flags });
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

async function check(paths: string[]): Promise<number> {
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

/** The procedure `epoch bump` is one step of, printed with its outcome. */
const RESTORE_PROCEDURE = `Restoring a fencegate store from a backup (docs/operations.md, "Backup and restore"):
  1. stop every fencegate process that uses the store (every gateway, every worker)
  2. restore the backup (the directory, the database schema, the Redis data)
  3. fencegate epoch bump --store STORE      (this command)
  4. start the fencegate processes again
Every token issued before the bump is refused from now on, and every lease granted
before it ends: its holder is told lease-lost at its next renewal and acquires again.
`;

async function epoch(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    strict: true,
    allowPositionals: true,
    options: {
      store: { type: 'string' },
      'store-namespace': { type: 'string' },
      'store-ca': { type: 'string' },
      'allow-volatile-redis': { type: 'boolean' },
      force: { type: 'boolean' },
    },
  });
  if (positionals[0] !== 'bump' || positionals.length !== 1)
    return fail('usage: fencegate epoch bump --store STORE [--force]');
  // The store is named, never defaulted: a bump acts on one existing store (a typo must not
  // create another and report success).
  if (values.store === undefined || values.store === '')
    return fail('epoch bump: --store is required (the store you restored)');
  const config = resolveConfig({
    env: process.env,
    flags: {
      store: values.store,
      ...(values['store-namespace'] ? { storeNamespace: values['store-namespace'] } : {}),
      ...(values['store-ca'] ? { storeCa: values['store-ca'] } : {}),
    },
  });
  const { openStore, redactStoreSpec } = await import('./store/index.js');
  const { readCertificates } = await import('./http/tls.js');
  const where = redactStoreSpec(config.store);
  const options = {
    mustExist: true,
    allowVolatileRedis: values['allow-volatile-redis'] ?? config.allowVolatileRedis,
    ...(config.storeNamespace ? { namespace: config.storeNamespace } : {}),
    ...(config.storeCa === null ? {} : { tlsCa: readCertificates(config.storeCa, 'store CA') }),
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
