/**
 * Logs: one pino logger per process, made by the CLI and passed down. Every line is
 * one JSON object (or, with format "pretty", pino-pretty's rendering of it), lifecycle
 * lines included; each listener's lines carry `listener: "data" | "control"`.
 * The fields and levels are documented in docs/observability.md.
 */
import { pino, type DestinationStream, type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { FenceEvent } from './events.js';

export type { Logger } from 'pino';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export interface LoggerOptions {
  level: LogLevel;
  format: LogFormat;
  /** Where lines go; default stdout. */
  destination?: DestinationStream;
}

/** The process's root logger. */
export function createLogger(options: LoggerOptions): Logger {
  const settings = {
    level: options.level,
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  if (options.format === 'pretty') {
    return pino(
      settings,
      pretty({
        destination: options.destination ?? 1,
        sync: true,
        colorize: options.destination === undefined && process.stdout.isTTY === true,
        translateTime: 'SYS:HH:MM:ss.l',
        ignore: 'pid,hostname',
        singleLine: true,
      }),
    );
  }
  return pino(settings, options.destination ?? pino.destination({ dest: 1, sync: true }));
}

/** The default format: pretty on a terminal, JSON otherwise. */
export function defaultLogFormat(): LogFormat {
  return process.stdout.isTTY === true ? 'pretty' : 'json';
}

/** A logger that writes nothing (library use without a logger). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}

/**
 * The logger for lifecycle lines (started, listening, policy reloads, shutting down):
 * they are info lines, but shown at every level except silent, because supervisors,
 * scripts and tests read the listening line and operators need to see reloads at
 * --log-level warn too.
 */
export function lifecycleLogger(root: Logger): Logger {
  const level = root.level === 'silent' || root.isLevelEnabled('info') ? root.level : 'info';
  return root.child({}, { level });
}

/** Whether `log` writes lines at `level` (true for a logger that cannot say). */
export function levelEnabled(log: object, level: string): boolean {
  const enabled = (log as { isLevelEnabled?: (l: string) => boolean }).isLevelEnabled;
  return typeof enabled === 'function' ? enabled.call(log, level) : true;
}

/**
 * The EventLog's log callback: a warn line per event the rate limit lets through (the
 * event under `event`; message `<type>: <reason>`, e.g. `fenced-write: stale`), and for
 * the lines it held back one summary line (`suppressed`: how many), also counted in
 * fencegate_log_lines_suppressed_total.
 */
export function fencedWriteLog(
  log: Logger,
  suppressedLines: { inc(n: number): void },
): (entry: FenceEvent | { suppressed: number }) => void {
  return (entry) => {
    if ('suppressed' in entry) {
      suppressedLines.inc(entry.suppressed);
      log.warn(
        { suppressed: entry.suppressed },
        `${entry.suppressed} event log lines suppressed by the rate limit`,
      );
    } else {
      const type = (entry as { type?: string }).type ?? 'fenced-write';
      log.warn({ event: entry }, `${type}: ${entry.reason}`);
    }
  };
}
