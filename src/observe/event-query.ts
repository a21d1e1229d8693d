/**
 * The query parameters of GET /v1/events, /v1/events/stream and /v1/locks, validated:
 * an unknown, repeated or out-of-range parameter is a 400 `invalid-query` problem that
 * names it (docs/events.md lists them).
 */
import { ProblemError } from '../errors.js';
import { ALL_REASONS, EVENT_TYPES, type EventFilter, type EventReason, type EventType } from './events.js';

/** Longest route name, lock key or prefix accepted in a filter (bytes). */
const MAX_TEXT_BYTES = 1024;
export const DEFAULT_EVENT_LIMIT = 200;
export const MAX_EVENT_LIMIT = 10_000;
export const DEFAULT_LOCK_LIMIT = 100;
export const MAX_LOCK_LIMIT = 1000;

type RawQuery = Record<string, string | string[] | undefined>;

function bad(parameter: string, detail: string): ProblemError {
  return new ProblemError('invalid-query', detail, { parameter });
}

/** The single value of each parameter; refuses parameters not in `allowed`, and repeats. */
function single(query: unknown, allowed: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  if (query === null || typeof query !== 'object') return out;
  for (const [name, value] of Object.entries(query as RawQuery)) {
    if (!allowed.includes(name)) {
      throw bad(name, `unknown query parameter "${name}"; this listing takes ${allowed.join(', ')}`);
    }
    if (Array.isArray(value)) throw bad(name, `"${name}" is given more than once`);
    if (value !== undefined) out.set(name, value);
  }
  return out;
}

function text(name: string, value: string, allowEmpty: boolean): string {
  if (!allowEmpty && value === '') throw bad(name, `"${name}" must not be empty`);
  if (Buffer.byteLength(value) > MAX_TEXT_BYTES)
    throw bad(name, `"${name}" is longer than ${MAX_TEXT_BYTES} bytes`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(value)) throw bad(name, `"${name}" contains control characters`);
  return value;
}

function list<T extends string>(name: string, value: string, known: readonly T[]): T[] {
  const items = value.split(',');
  for (const item of items) {
    if (!(known as readonly string[]).includes(item)) {
      throw bad(name, `unknown ${name} "${item.slice(0, 64)}"; one of ${known.join(', ')} (comma-separated)`);
    }
  }
  return items as T[];
}

function integer(name: string, value: string, min: number, max: number): number {
  if (!/^(0|[1-9][0-9]{0,15})$/.test(value) || Number(value) < min || Number(value) > max) {
    throw bad(name, `"${name}" must be a whole number from ${min} to ${max}`);
  }
  return Number(value);
}

/** An ISO 8601 date-time with a zone, e.g. 2026-12-01T12:00:00Z or …+01:00. */
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/;

/** `since`: an event id (events after it) or an ISO 8601 time (events at or after it). */
export function parseSince(name: string, value: string): Pick<EventFilter, 'afterId' | 'fromTime'> {
  if (/^[0-9]+$/.test(value)) return { afterId: integer(name, value, 0, Number.MAX_SAFE_INTEGER) };
  const ms = ISO_TIME.test(value) ? Date.parse(value) : NaN;
  if (Number.isNaN(ms)) {
    throw bad(name, `"${name}" must be an event id (a whole number) or an ISO 8601 time with a zone`);
  }
  return { fromTime: ms };
}

export interface EventQuery {
  filter: EventFilter;
  limit: number;
}

const EVENT_PARAMS = ['route', 'lock', 'type', 'reason', 'since', 'limit'] as const;

/** GET /v1/events and /v1/events/stream (`limit` only for the former). */
export function parseEventQuery(query: unknown, { stream }: { stream: boolean }): EventQuery {
  const allowed = stream ? EVENT_PARAMS.filter((p) => p !== 'limit') : EVENT_PARAMS;
  const q = single(query, allowed);
  const filter: EventFilter = {};
  const route = q.get('route');
  if (route !== undefined) filter.route = text('route', route, false);
  const lock = q.get('lock');
  if (lock !== undefined) filter.lock = text('lock', lock, false);
  const type = q.get('type');
  if (type !== undefined) filter.types = list<EventType>('type', type, EVENT_TYPES);
  const reason = q.get('reason');
  if (reason !== undefined) filter.reasons = list<EventReason>('reason', reason, ALL_REASONS);
  const since = q.get('since');
  if (since !== undefined) Object.assign(filter, parseSince('since', since));
  const limitText = q.get('limit');
  const limit =
    limitText === undefined ? DEFAULT_EVENT_LIMIT : integer('limit', limitText, 1, MAX_EVENT_LIMIT);
  return { filter, limit };
}

export interface LocksQuery {
  prefix: string;
  limit: number;
  after: string | null;
}

/** The cursor of GET /v1/locks: the last key of the previous page, base64url. */
export function encodeCursor(key: string): string {
  return Buffer.from(key, 'utf8').toString('base64url');
}

function decodeCursor(value: string): string {
  const key = /^[A-Za-z0-9_-]+$/.test(value) ? Buffer.from(value, 'base64url').toString('utf8') : '';
  if (key === '' || encodeCursor(key) !== value)
    throw bad('cursor', '"cursor" is not a cursor this server made');
  return key;
}

/** GET /v1/locks. */
export function parseLocksQuery(query: unknown): LocksQuery {
  const q = single(query, ['prefix', 'limit', 'cursor']);
  const prefix = text('prefix', q.get('prefix') ?? '', true);
  const limitText = q.get('limit');
  const limit = limitText === undefined ? DEFAULT_LOCK_LIMIT : integer('limit', limitText, 1, MAX_LOCK_LIMIT);
  const cursor = q.get('cursor');
  return { prefix, limit, after: cursor === undefined ? null : decodeCursor(cursor) };
}
