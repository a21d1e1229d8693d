/**
 * A backend's failure as the StoreUnavailableError a Store method throws: `what` failed,
 * and the first line of why (a StoreUnavailableError passes through as it is).
 */
import { StoreUnavailableError } from '../errors.js';

export function storeFailure(err: unknown, what: string): StoreUnavailableError {
  if (err instanceof StoreUnavailableError) return err;
  const why = err instanceof Error ? err.message.split('\n')[0] : String(err);
  return new StoreUnavailableError(`${what}: ${why}`, { cause: err });
}
