/** Public API of the fencegate package. */
export * from './tokens.js';
export { PROBLEMS, ProblemError, StoreUnavailableError, problemBody } from './errors.js';
export type { ProblemCode, ProblemBody } from './errors.js';
export type * from './store/types.js';
export { openStore } from './store/index.js';
export { startServer } from './serve.js';
export type { RunningServer, ReloadTrigger } from './serve.js';
export { createLogger } from './observe/log.js';
export type { Logger, LoggerOptions, LogFormat, LogLevel } from './observe/log.js';
export * from './client/index.js';
