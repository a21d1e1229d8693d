/**
 * Loads schema.sql and queries.sql (copied next to the compiled JS by the build)
 * and binds them to one schema. The row types of each statement live here, next
 * to the list of names, so a renamed column shows up as a type error in one place.
 */
import { readFileSync } from 'node:fs';
import { quoteIdent } from './driver.js';

const QUERY_NAMES = [
  'init_lock',
  'schema_version',
  'ensure_key',
  'acquire_context',
  'grant',
  'renew',
  'release',
  'inspect',
  'list_locks',
  'recent_grants',
  'enqueue_waiter',
  'remove_waiter',
  'fence_batch',
  'deliver',
  'lower_inflight',
  'drop_inflight',
  'idem_begin',
  'idem_finish',
  'idem_abandon',
  'session_open',
  'session_beat',
  'session_read',
  'session_end',
  'identity',
  'epoch_set',
  'inflight_forget',
  'bump_epoch',
  'health',
  'durability',
  'now',
  'prune',
] as const;

export type QueryName = (typeof QUERY_NAMES)[number];
export type Queries = Readonly<Record<QueryName, string>>;

/** The schema version this code writes and expects (meta.schema_version). */
export const SCHEMA_VERSION = '3';

const SCHEMA_SQL = readFileSync(new URL('./schema.sql', import.meta.url), 'utf8');
const QUERIES_SQL = readFileSync(new URL('./queries.sql', import.meta.url), 'utf8');

/** Splits a file of `-- name: x` sections into named statements. */
export function parseNamed(text: string): Map<string, string> {
  const out = new Map<string, string>();
  let name: string | null = null;
  let lines: string[] = [];
  const flush = (): void => {
    if (name !== null) out.set(name, lines.join('\n').trim().replace(/;\s*$/, ''));
  };
  for (const line of text.split('\n')) {
    const m = /^-- name: ([a-z_]+)\s*$/.exec(line);
    if (m) {
      flush();
      name = m[1] ?? null;
      lines = [];
    } else if (name !== null) {
      lines.push(line);
    }
  }
  flush();
  return out;
}

const PARSED = parseNamed(QUERIES_SQL);
for (const name of QUERY_NAMES) {
  if (!PARSED.has(name)) throw new Error(`queries.sql has no statement named ${name}`);
}

function bind(text: string, schema: string): string {
  return text.replaceAll('{schema}', quoteIdent(schema));
}

/** The DDL for one schema (several statements, no parameters). */
export function schemaSql(schema: string): string {
  return bind(SCHEMA_SQL, schema);
}

/** Every named statement bound to one schema. */
export function queriesFor(schema: string): Queries {
  const out = {} as Record<QueryName, string>;
  for (const name of QUERY_NAMES) out[name] = bind(PARSED.get(name) ?? '', schema);
  return Object.freeze(out);
}

// ---- row types (every bigint as text) ----

export interface LockRow {
  now: string;
  key: string;
  issued: string | null;
  highest: string | null;
  shadow_highest: string | null;
  lease_id: string | null;
  owner: string | null;
  token: string | null;
  expires_at: string | null;
  waiters: number;
  epoch_floor: string;
}

export interface AcquireContextRow {
  now: string;
  epoch_floor: string | null;
  key_floor: string;
  issued: string | null;
  lease_id: string | null;
  owner: string | null;
  token: string | null;
  ttl_ms: string | null;
  expires_at: string | null;
  replay_lease_id: string | null;
  replay_token: string | null;
  replay_ttl_ms: string | null;
  replay_expires_at: string | null;
  replay_took_over: boolean | null;
  head_waiter_id: string | null;
  head_deadline: string | null;
}

export interface GrantRow {
  token: string;
  expires_at: string;
}

export interface RenewRow {
  owner: string;
  token: string;
  expires_at: string;
}

export interface FenceBatchRow {
  /** 1-based position of the admission in the batch. */
  ord: number;
  verdict: 'ok' | 'stale' | 'forged' | 'lease-expired';
  highest: string | null;
  lower_inflight: number;
  epoch_id: string | null;
  epoch_floor: string | null;
}

export interface IdentityRow {
  current: string;
  id: string;
  floor: string;
  recorded: string | null;
  now: string;
}

export interface LowerInflightRow {
  count: number;
  /** Space-separated session ids ('' when none). */
  sessions: string;
  bounds: string;
}

export interface DeliverRow {
  delivering: number;
}

export interface SessionBeatRow {
  alive: number;
  now: string;
}

export interface SessionRow {
  id: string;
  beat: string;
  ttl_ms: string;
}

export interface SessionEndRow {
  ended: number;
}

export interface EpochRow {
  id: string;
  floor: string;
}

export interface HealthRow {
  now: string;
  id: string | null;
  floor: string | null;
}

export interface DurabilityRow {
  fsync: string;
  synchronous_commit: string;
}

export interface PruneRow {
  grants: number;
  waiters: number;
  inflight: number;
  idempotency: number;
}

export interface IdemBeginRow {
  state: 'begun' | 'mismatch' | 'in-flight' | 'done';
  retry_after: string | null;
  response: string | null;
}

export interface IdemFinishRow {
  stored: number;
}
