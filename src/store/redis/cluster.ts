/**
 * Redis Cluster behind the store's Connection seam (docs/adr/0021-redis-cluster.md).
 *
 * One ioredis Cluster client routes every command by its key's hash slot (every key of a
 * lock shares one hash tag, keys.ts) and follows MOVED and ASK itself. What this module
 * adds is the gate that keeps ADR 0019's promise on a cluster: **no command that reads or
 * writes fencegate's data reaches a primary that this process has not verified** (AOF
 * `appendfsync always`, noeviction, role master, and its identity recorded in the epoch
 * record, which starts a new epoch when it is a promoted replica). Each node's connection
 * is wrapped: a data command to a node whose current connection was not verified is
 * refused before it is written (the store then verifies every primary again), whether the
 * node was chosen from the slot map or by a MOVED or ASK redirection. A node's verification
 * ends with its connection (a restart, a failover) and when a slot-map refresh no longer
 * lists it as a primary.
 *
 * Commands are never re-sent after a lost connection (a re-sent acquire could grant
 * twice): ioredis's retry on a closed connection and on CLUSTERDOWN is off. Redirections
 * (MOVED, ASK, TRYAGAIN) are followed: the node that answered them ran nothing.
 */
import { Cluster, Command, type ClusterOptions, type Redis } from 'ioredis';
import { StoreUnavailableError } from '../../errors.js';
import { CLIENT_OPTIONS, COMMAND_TIMEOUT_MS, CONNECT_TIMEOUT_MS } from './options.js';

export interface ClusterSpec {
  nodes: { host: string; port: number }[];
  username?: string;
  password?: string;
  tls: boolean;
}

/** `redis+cluster://[user:pass@]host:port,host:port…` (rediss+ for TLS), or why not. */
export function parseClusterSpec(spec: string): ClusterSpec | string {
  const m = /^(rediss?)\+cluster:\/\/(?:([^@/]*)@)?([^/?#]*)\/?$/i.exec(spec);
  if (m === null) return 'expected redis+cluster://host:port[,host:port…] (no path, query or fragment)';
  const tls = m[1]?.toLowerCase() === 'rediss';
  const hosts = (m[3] ?? '').split(',').filter((h) => h !== '');
  if (hosts.length === 0) return 'names no node (expected redis+cluster://host:port[,host:port…])';
  const nodes: { host: string; port: number }[] = [];
  for (const h of hosts) {
    const hm = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(h);
    const port = hm?.[2] === undefined ? 6379 : Number(hm[2]);
    if (hm === null || !Number.isInteger(port) || port < 1 || port > 65535) return `"${h}" is not host:port`;
    nodes.push({ host: (hm[1] ?? '').replace(/^\[|\]$/g, ''), port });
  }
  const out: ClusterSpec = { nodes, tls };
  if (m[2] !== undefined && m[2] !== '') {
    const colon = m[2].indexOf(':');
    const user = decodeURIComponent(colon < 0 ? m[2] : m[2].slice(0, colon));
    if (colon >= 0) out.password = decodeURIComponent(m[2].slice(colon + 1));
    if (user !== '') out.username = user;
  }
  return out;
}

/** The spec with its password masked. */
export function redactClusterSpec(spec: string): string {
  return spec.replace(/^(rediss?\+cluster:\/\/)([^@/:]*):[^@/]*@/i, '$1$2:***@');
}

/** Commands that read or write no data of fencegate's: ioredis's own, and verification's. */
const HARMLESS = new Set([
  'info', 'cluster', 'client', 'select', 'auth', 'hello', 'readonly', 'readwrite', 'ping',
  'quit', 'asking', 'config', 'role', 'command',
]); // prettier-ignore

/** A data command refused because its node is not verified (the store verifies, the caller retries). */
export class NodeNotVerifiedError extends StoreUnavailableError {
  constructor(node: string) {
    super(`redis cluster node ${node} is not verified yet (a topology change); verifying again`);
    this.name = 'NodeNotVerifiedError';
  }
}

export function nodeKey(node: Redis): string {
  return `${node.options.host ?? '?'}:${node.options.port ?? '?'}`;
}

export class ClusterTopology {
  readonly client: Cluster;
  /** Nodes whose current connection was verified (ADR 0019), with the run_id seen. */
  private readonly verified = new WeakMap<Redis, string>();
  /** Bumped on every close of a node's connection: a verification that spans one counts for nothing. */
  private readonly incarnation = new WeakMap<Redis, number>();
  private readonly changeListeners = new Set<() => void>();
  private readonly wrapped = new WeakSet<Redis>();

  constructor(spec: ClusterSpec, { redisOptions, ...options }: Partial<ClusterOptions> = {}) {
    const { lazyConnect: _lazy, enableOfflineQueue: _queue, retryStrategy: _retry, ...node } = CLIENT_OPTIONS;
    this.client = new Cluster(spec.nodes, {
      lazyConnect: true,
      enableOfflineQueue: false,
      enableAutoPipelining: false,
      scaleReads: 'master',
      // A command whose connection closed is failed, never sent to the next primary.
      retryDelayOnFailover: 0,
      retryDelayOnClusterDown: 0,
      retryDelayOnTryAgain: 100,
      retryDelayOnMoved: 0,
      maxRedirections: 16,
      slotsRefreshTimeout: COMMAND_TIMEOUT_MS,
      slotsRefreshInterval: 1000,
      clusterRetryStrategy: (times: number) => Math.min(50 * times, 1000),
      redisOptions: {
        ...node,
        connectTimeout: CONNECT_TIMEOUT_MS,
        ...(spec.username === undefined ? {} : { username: spec.username }),
        ...(spec.password === undefined ? {} : { password: spec.password }),
        ...(spec.tls ? { tls: {} } : {}),
        ...redisOptions,
      },
      ...options,
    });
    this.client.on('+node', (n: Redis) => this.wrap(n));
    this.client.on('-node', (n: Redis) => this.lose(n));
    this.client.on('refresh', () => this.refreshed());
  }

  /** Called when a verified node is lost or the primaries change: the store verifies again. */
  onChange(listener: () => void): void {
    this.changeListeners.add(listener);
  }

  /** The primaries in the current slot map. */
  primaries(): Redis[] {
    return this.client.nodes('master');
  }

  /** The node's connection incarnation (compare before and after a verification). */
  generation(node: Redis): number {
    return this.incarnation.get(node) ?? 0;
  }

  /** Marks the node verified, unless its connection closed since `generation`. */
  markVerified(node: Redis, runId: string, generation: number): boolean {
    if (this.generation(node) !== generation || node.status !== 'ready') return false;
    this.verified.set(node, runId);
    return true;
  }

  /** The primary that serves `slot` in the current slot map, or undefined. */
  ownerOf(slot: number): Redis | undefined {
    const c = this.client as unknown as { slots: (string[] | undefined)[] };
    const key = c.slots[slot]?.[0];
    return key === undefined ? undefined : this.primaries().find((n) => nodeKey(n) === key);
  }

  /** The lowest slot `node` serves as primary in the current slot map, or undefined. */
  lowestSlotOf(node: Redis): number | undefined {
    const c = this.client as unknown as { slots: (string[] | undefined)[] };
    const key = nodeKey(node);
    for (let s = 0; s < 16384; s++) if (c.slots[s]?.[0] === key) return s;
    return undefined;
  }

  isVerified(node: Redis): boolean {
    return this.verified.has(node);
  }

  /** A command on this node that passes the gate (verification's own commands). */
  raw(node: Redis, name: string, args: (string | number)[]): Promise<unknown> {
    const c = new Command(name, args, { replyEncoding: 'utf8' });
    this.bypass.add(c);
    void node.sendCommand(c);
    return c.promise;
  }

  /** Reloads the slot map now. */
  refresh(): Promise<void> {
    return new Promise((resolve, reject) => {
      (this.client as unknown as { refreshSlotsCache(cb: (err?: Error) => void): void }).refreshSlotsCache(
        (err?: Error) => (err ? reject(err) : resolve()),
      );
    });
  }

  private readonly bypass = new WeakSet<Command>();

  private wrap(node: Redis): void {
    if (this.wrapped.has(node)) return;
    this.wrapped.add(node);
    const send = node.sendCommand.bind(node);
    node.sendCommand = ((command: Command, stream?: unknown) => {
      if (this.verified.has(node) || this.bypass.has(command) || HARMLESS.has(command.name)) {
        return send(command, stream as never);
      }
      command.reject(new NodeNotVerifiedError(nodeKey(node)));
      this.changed();
      return command.promise;
    }) as Redis['sendCommand'];
    node.on('close', () => {
      this.incarnation.set(node, this.generation(node) + 1);
      if (this.verified.delete(node)) this.changed();
    });
  }

  private lose(node: Redis): void {
    this.incarnation.set(node, this.generation(node) + 1);
    if (this.verified.delete(node)) this.changed();
  }

  /** After a slot-map refresh: a verified node that is no longer a primary is verified no more. */
  private refreshed(): void {
    const primaries = new Set(this.primaries());
    let changed = false;
    for (const node of this.client.nodes('all')) {
      if (!primaries.has(node) && this.verified.delete(node)) changed = true;
    }
    for (const node of primaries) if (!this.verified.has(node)) changed = true;
    if (changed) this.changed();
  }

  private changed(): void {
    for (const l of this.changeListeners) l();
  }
}

const CRC16_TABLE = (() => {
  const t = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    t[i] = c;
  }
  return t;
})();

/** The hash slot of a key (CRC16/XMODEM of its hash tag, or of the key, mod 16384). */
export function keySlot(key: string): number {
  let bytes = Buffer.from(key);
  const open = bytes.indexOf(0x7b);
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const b of bytes) crc = ((crc << 8) & 0xffff) ^ (CRC16_TABLE[((crc >> 8) ^ b) & 0xff] ?? 0);
  return crc & 16383;
}
