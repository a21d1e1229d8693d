/** Errors raised by the client SDK. Each carries the server's problem body when there was one. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail?: string;
  [extra: string]: unknown;
}

export class FencegateError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly problem: Problem | null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'FencegateError';
  }

  /** The problem code, e.g. "lock-held", from `urn:fencegate:lock-held`. */
  get code(): string | null {
    return this.problem?.type.startsWith('urn:fencegate:') ? this.problem.type.slice(14) : null;
  }
}

/** Acquire gave up: the lock stayed held for the whole waitMs. */
export class LockHeldError extends FencegateError {
  override name = 'LockHeldError';
  get retryAfterMs(): number | null {
    const v = this.problem?.['retryAfterMs'];
    return typeof v === 'number' ? v : null;
  }
}

/** The lease is gone (expired, taken over, or could not be renewed in time): stop working. */
export class LeaseLostError extends FencegateError {
  override name = 'LeaseLostError';
}
