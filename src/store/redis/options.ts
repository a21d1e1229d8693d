/**
 * The options of every Redis connection the store makes (one server, or each node of a
 * cluster): failures fast and visible (connection.ts explains each).
 */
import type { RedisOptions } from 'ioredis';

export const COMMAND_TIMEOUT_MS = 2000;
export const CONNECT_TIMEOUT_MS = 2000;
/** open() gives up after this long even if the socket neither connects nor fails. */
export const OPEN_DEADLINE_MS = 4000;

export const CLIENT_OPTIONS: RedisOptions = {
  lazyConnect: true,
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  autoResendUnfulfilledCommands: false,
  commandTimeout: COMMAND_TIMEOUT_MS,
  connectTimeout: CONNECT_TIMEOUT_MS,
  retryStrategy: (times: number) => Math.min(50 * times, 1000),
  // Each command is written when it is called. ioredis's auto-pipelining would gather a
  // tick's commands into one write, but builds a Pipeline object per tick (it copies every
  // defined script onto it): on the fenced path, where a turn's calls are already one
  // script call (fence-batch.ts, which writes it and its epoch re-read in one corked
  // write), it cost more gateway CPU than the system calls it saved (ADR 0014, addendum).
  enableAutoPipelining: false,
};
