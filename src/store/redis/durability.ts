/**
 * The durability check run by openRedisStore. A grant or an admission acknowledged by
 * Redis must survive a Redis crash, or a token could be minted twice and a fence could
 * move back. That needs the append-only file with `appendfsync always` (RDB snapshots or
 * `appendfsync everysec` lose the last writes on a crash), and no eviction (an evicted
 * fence key would let a stale token through; an evicted in-flight set would open the
 * drain barrier).
 */
import type { Redis } from 'ioredis';
import { type ServerConnection, unavailable } from './connection.js';

export const VOLATILE_FLAG = '--allow-volatile-redis';

/** Redis is reachable but not configured durably enough, and the flag was not given. */
export class RedisDurabilityError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RedisDurabilityError';
  }
}

export interface Durability {
  /** True when AOF with appendfsync always and noeviction were confirmed. */
  durable: boolean;
  /** One line for health().detail and startup logs. */
  detail: string;
}

interface Settings {
  /** 'config' when read with CONFIG GET; 'info' when CONFIG is unavailable (managed Redis). */
  source: 'config' | 'info';
  appendonly: boolean;
  /** null when it could not be read (INFO does not report it). */
  appendfsync: string | null;
  evictionPolicy: string | null;
}

function isReplyError(err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError';
}

async function configGet(client: Redis, name: string): Promise<string | null> {
  const reply: unknown = await client.config('GET', name);
  return Array.isArray(reply) && typeof reply[1] === 'string' ? reply[1] : null;
}

/** A field of an INFO section's text, or null. */
export function infoField(info: string, name: string): string | null {
  const m = new RegExp(`^${name}:(.*?)\\r?$`, 'm').exec(info);
  return m?.[1] ?? null;
}

async function readSettings(conn: ServerConnection): Promise<Settings> {
  const client = conn.client;
  try {
    const appendonly = await configGet(client, 'appendonly');
    const appendfsync = await configGet(client, 'appendfsync');
    const evictionPolicy = await configGet(client, 'maxmemory-policy');
    if (appendonly !== null)
      return { source: 'config', appendonly: appendonly === 'yes', appendfsync, evictionPolicy };
  } catch (err) {
    // CONFIG renamed, disabled or denied by ACL (managed Redis): an error reply.
    if (!isReplyError(err)) throw unavailable(conn, 'durability check', err);
  }
  try {
    const persistence = await client.info('persistence');
    const memory = await client.info('memory');
    return {
      source: 'info',
      appendonly: infoField(persistence, 'aof_enabled') === '1',
      appendfsync: null,
      evictionPolicy: infoField(memory, 'maxmemory_policy'),
    };
  } catch (err) {
    throw unavailable(conn, 'durability check', err);
  }
}

/**
 * Confirms AOF with appendfsync always and no eviction. Otherwise throws
 * RedisDurabilityError saying exactly what is wrong, unless allowVolatile, in which case
 * the returned detail says it.
 */
export async function checkDurability(conn: ServerConnection, allowVolatile: boolean): Promise<Durability> {
  const s = await readSettings(conn);
  const problems: string[] = [];
  const notes: string[] = [];
  if (!s.appendonly) {
    problems.push(
      s.source === 'config'
        ? 'appendonly is "no" (AOF is off)'
        : 'AOF is off (INFO persistence aof_enabled:0)',
    );
  }
  if (s.source === 'info') {
    const unverified = 'appendfsync could not be verified (CONFIG is unavailable)';
    if (s.appendonly) notes.push(`${unverified}, make sure it is "always"`);
    else problems.push(unverified);
  } else if (s.appendonly && s.appendfsync !== 'always') {
    problems.push(`appendfsync is "${s.appendfsync ?? 'unknown'}", not "always"`);
  }
  if (s.evictionPolicy !== null && s.evictionPolicy !== 'noeviction') {
    problems.push(`maxmemory-policy is "${s.evictionPolicy}", not "noeviction" (Redis could evict fences)`);
  }

  if (problems.length === 0) {
    const ok = 'AOF with appendfsync always, noeviction';
    return {
      durable: notes.length === 0,
      detail: notes.length === 0 ? ok : `AOF enabled; ${notes.join('; ')}`,
    };
  }
  const risk = 'acknowledged grants and fence moves could be lost';
  if (allowVolatile) {
    return {
      durable: false,
      detail: `volatile: ${problems.join('; ')}; ${risk} (allowed by ${VOLATILE_FLAG})`,
    };
  }
  throw new RedisDurabilityError(
    `redis at ${conn.where} is not durable enough for fencegate: ${problems.join('; ')}; ${risk}. ` +
      `Set "appendonly yes", "appendfsync always" and "maxmemory-policy noeviction", ` +
      `or start with ${VOLATILE_FLAG} to accept the risk.`,
  );
}
