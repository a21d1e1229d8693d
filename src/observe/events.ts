/**
 * Fenced-write events: kept in a bounded in-memory ring (the recent log), streamed
 * to subscribers (the dashboard's live feed), and logged at a bounded rate.
 */
export interface FenceEvent {
  /** ISO time the gateway decided. */
  time: string;
  route: string;
  lock: string;
  /** Presented token as a decimal string, or null when missing/malformed. */
  token: string | null;
  /** Highest admitted token at decision time, as a decimal string, when known. */
  highest: string | null;
  reason: 'stale' | 'forged' | 'missing' | 'lease' | 'malformed' | 'unavailable';
  /** False in shadow mode: the write was forwarded anyway. */
  enforced: boolean;
  client: string;
  owner: string | null;
  method: string;
  path: string;
}

export interface EventLogOptions {
  capacity?: number;
  /** At most this many log lines per second; the rest are counted and summarised. */
  logPerSecond?: number;
  log?: (event: FenceEvent | { suppressed: number }) => void;
}

export class EventLog {
  private readonly ring: FenceEvent[] = [];
  private readonly capacity: number;
  private readonly listeners = new Set<(e: FenceEvent) => void>();
  private readonly logPerSecond: number;
  private readonly log: EventLogOptions['log'];
  private windowStart = 0;
  private windowCount = 0;
  private suppressed = 0;
  total = 0;

  constructor(options: EventLogOptions = {}) {
    this.capacity = options.capacity ?? 1000;
    this.logPerSecond = options.logPerSecond ?? 10;
    this.log = options.log;
  }

  record(event: FenceEvent): void {
    this.total += 1;
    this.ring.push(event);
    if (this.ring.length > this.capacity) this.ring.shift();
    for (const l of this.listeners) l(event);
    this.rateLimitedLog(event);
  }

  /** Most recent first, at most `limit`. */
  recent(limit = 100): FenceEvent[] {
    return this.ring.slice(-limit).reverse();
  }

  subscribe(listener: (e: FenceEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private rateLimitedLog(event: FenceEvent): void {
    if (!this.log) return;
    const now = Date.now();
    if (now - this.windowStart >= 1000) {
      if (this.suppressed > 0) this.log({ suppressed: this.suppressed });
      this.windowStart = now;
      this.windowCount = 0;
      this.suppressed = 0;
    }
    if (this.windowCount < this.logPerSecond) {
      this.windowCount += 1;
      this.log(event);
    } else {
      this.suppressed += 1;
    }
  }
}
