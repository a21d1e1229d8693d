/**
 * Connecting to Redis so that failures are fast and visible: no offline queue (a command
 * sent while disconnected fails at once instead of waiting), a command timeout, no
 * automatic re-sending of commands whose reply was lost (a re-sent acquire could grant
 * twice), and reconnection in the background forever.
 */
import { type Cluster, Redis, type RedisOptions } from 'ioredis';
import { CLIENT_OPTIONS, COMMAND_TIMEOUT_MS, OPEN_DEADLINE_MS } from './options.js';
import { StoreUnavailableError } from '../../errors.js';
import type { ClusterTopology } from './cluster.js';

export { CLIENT_OPTIONS, COMMAND_TIMEOUT_MS, CONNECT_TIMEOUT_MS, OPEN_DEADLINE_MS } from './options.js';

/** A client plus the last connection-level error it reported (for messages). */
export interface Connection {
  client: Redis | Cluster;
  /** Redacted URL, safe to print. */
  where: string;
  lastError(): Error | null;
  /** Redis Cluster: the nodes, their verification gate (cluster.ts); null for one server. */
  topology: ClusterTopology | null;
}

/** A connection to one server (not a cluster): durability and identity are read on it directly. */
export type ServerConnection = Connection & { client: Redis };

/** The URL with any password replaced by `***`. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '<unparseable redis url>';
  }
}

function errorCode(err: unknown): string | null {
  if (typeof err === 'object' && err !== null && 'code' in err) {
    const code = (err as { code: unknown }).code;
    if (typeof code === 'string' && code.length > 0) return code;
  }
  return null;
}

/**
 * A short cause, from err.code, err.name and the client's status (never from message
 * text): ioredis reports a refused command (not connected, offline queue off) and a
 * command timeout as plain Errors.
 */
export function describeError(err: unknown, status?: string): string {
  const code = errorCode(err);
  if (code !== null) return code;
  if (err instanceof Error) {
    switch (err.name) {
      case 'ReplyError':
        return 'error reply from Redis';
      case 'MaxRetriesPerRequestError':
        return 'no connection after retries';
      case 'AbortError':
        return 'command aborted by a lost connection';
    }
  }
  if (status !== undefined && status !== 'ready') return `not connected (${status})`;
  return `no reply within ${COMMAND_TIMEOUT_MS} ms`;
}

/** Wraps any failure of a Redis call as StoreUnavailableError (one line, with cause). */
export function unavailable(conn: Connection, op: string, err: unknown): StoreUnavailableError {
  if (err instanceof StoreUnavailableError) return err;
  const last = conn.lastError();
  const lastCode = last === null ? null : errorCode(last);
  // A socket the peer has reset can stop taking writes before ioredis has seen the close
  // (its status still says ready): ioredis then refuses the command at once, which must not
  // be reported as a timeout.
  const stream = 'stream' in conn.client ? conn.client.stream : undefined;
  const writable = stream?.writable !== false;
  const why = describeError(err, writable ? conn.client.status : 'closing');
  const extra = lastCode !== null && lastCode !== why ? `; last connection error ${lastCode}` : '';
  return new StoreUnavailableError(`redis store unavailable (${op} at ${conn.where}): ${why}${extra}`, {
    cause: err,
  });
}

/** Builds a client (not yet connected) that records its connection errors. */
export function createConnection(url: string, overrides: RedisOptions = {}): ServerConnection {
  const client = new Redis(url, { ...CLIENT_OPTIONS, ...overrides });
  return { ...track(client, redactUrl(url), null), client };
}

/** A connection to a Redis Cluster through its topology (cluster.ts), not yet connected. */
export function clusterConnection(topology: ClusterTopology, where: string): Connection {
  return track(topology.client, where, topology);
}

/**
 * A second connection with the same options (e.g. the pub/sub subscriber), not yet
 * connected. On a cluster, a second Cluster client without the gate: it carries pub/sub
 * only, which reads and writes no data.
 */
export function duplicateConnection(conn: Connection, overrides: RedisOptions = {}): Connection {
  const c = conn.client;
  if (c instanceof Redis) return track(c.duplicate({ ...overrides, lazyConnect: true }), conn.where, null);
  const opts = c.options;
  return track(
    c.duplicate(undefined, {
      lazyConnect: true,
      redisOptions: { ...opts.redisOptions, ...overrides },
    }),
    conn.where,
    null,
  );
}

function track(client: Redis | Cluster, where: string, topology: ClusterTopology | null): Connection {
  let last: Error | null = null;
  client.on('error', (err: Error) => {
    last = err;
  });
  // A Cluster client reports a node's connection errors apart from its own.
  client.on('node error', (err: Error) => {
    last = err;
  });
  client.on('ready', () => {
    last = null;
  });
  return { client, where, lastError: () => last, topology };
}

/**
 * Connects, or rejects with a one-line StoreUnavailableError within OPEN_DEADLINE_MS
 * (the client is then disconnected: nothing keeps retrying behind the caller's back).
 */
export async function connect(conn: Connection, deadlineMs = OPEN_DEADLINE_MS): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('deadline')), deadlineMs);
  });
  try {
    await Promise.race([conn.client.connect(), deadline]);
  } catch (err) {
    conn.client.disconnect();
    const last = conn.lastError();
    const why = last !== null ? describeError(last) : `no answer within ${deadlineMs} ms`;
    throw new StoreUnavailableError(`cannot connect to redis at ${conn.where}: ${why}`, {
      cause: last ?? err,
    });
  } finally {
    clearTimeout(timer);
  }
}
