/**
 * What each HTTP (and s3) upstream answered lately, for GET /v1/upstreams and the
 * dashboard's upstream panel: requests, errors (a 5xx answer, or none: refused, reset,
 * timed out, circuit open), latency and the last error, over the last WINDOW_MS. Each
 * upstream keeps its last KEPT outcomes in a fixed ring (four typed arrays: no allocation
 * per request, a few stores); a summary is computed when read. With --workers each worker
 * keeps its own and the primary adds their summaries (mergeSummaries).
 */

/** The window the summaries cover. */
export const WINDOW_MS = 5 * 60_000;
/** Outcomes kept per upstream: past this many in the window, the summary covers the newest KEPT. */
export const KEPT = 2048;

export interface LastError {
  /** The status the client got (the upstream's 5xx, or the gateway's 502/504 when there was no answer). */
  status: number;
  time: string;
  message: string;
}

export interface UpstreamSummary {
  /** Requests in the window (at most KEPT). */
  requests: number;
  errors: number;
  /** Requests by status class: "1xx" … "5xx", "none" (no answer: the gateway answered 502/504). */
  statuses: Record<string, number>;
  latencyMs: { mean: number | null; p50: number | null; p99: number | null };
  /** The newest error (kept when it is older than the window), or null. */
  lastError: LastError | null;
  /** The window covered: its start (ISO; the oldest outcome kept when the ring is full), and its length. */
  windowS: number;
  from: string;
}

class Ring {
  readonly at = new Float64Array(KEPT);
  readonly ms = new Float32Array(KEPT);
  readonly status = new Uint16Array(KEPT);
  next = 0;
  size = 0;
  lastError: LastError | null = null;
}

const CLASSES = ['none', '1xx', '2xx', '3xx', '4xx', '5xx'];

export class UpstreamStats {
  private readonly rings = new Map<string, Ring>();

  /** An upstream answered `status` after `ms` (0: no answer; then `error` says why and `status` is what the client got). */
  record(upstream: string, status: number, ms: number, error?: { status: number; message: string }): void {
    let ring = this.rings.get(upstream);
    if (ring === undefined) {
      ring = new Ring();
      this.rings.set(upstream, ring);
    }
    const now = Date.now();
    const i = ring.next;
    ring.at[i] = now;
    ring.ms[i] = ms;
    ring.status[i] = status;
    ring.next = (i + 1) % KEPT;
    ring.size = Math.min(KEPT, ring.size + 1);
    if (error !== undefined)
      ring.lastError = { status: error.status, time: new Date(now).toISOString(), message: error.message };
    else if (status >= 500)
      ring.lastError = {
        status,
        time: new Date(now).toISOString(),
        message: `the upstream answered ${status}`,
      };
  }

  /** Forgets an upstream (it left the policy). */
  drop(upstream: string): void {
    this.rings.delete(upstream);
  }

  /** Each upstream's summary of the last WINDOW_MS. */
  summaries(now = Date.now()): Record<string, UpstreamSummary> {
    const out: Record<string, UpstreamSummary> = {};
    for (const [name, ring] of this.rings) out[name] = summarise(ring, now);
    return out;
  }
}

function summarise(ring: Ring, now: number): UpstreamSummary {
  const from = now - WINDOW_MS;
  const latencies: number[] = [];
  const statuses: Record<string, number> = {};
  let errors = 0;
  let oldest = now;
  for (let k = 0; k < ring.size; k++) {
    const i = (ring.next - 1 - k + KEPT) % KEPT;
    const at = ring.at[i] as number;
    if (at < from) break;
    oldest = at;
    const status = ring.status[i] as number;
    const cls = CLASSES[status === 0 ? 0 : Math.floor(status / 100)] ?? 'none';
    statuses[cls] = (statuses[cls] ?? 0) + 1;
    if (status === 0 || status >= 500) errors += 1;
    latencies.push(ring.ms[i] as number);
  }
  return {
    requests: latencies.length,
    errors,
    statuses,
    latencyMs: latencyOf(latencies),
    lastError: ring.lastError,
    windowS: WINDOW_MS / 1000,
    from: new Date(latencies.length === KEPT ? oldest : from).toISOString(),
  };
}

function latencyOf(ms: number[]): UpstreamSummary['latencyMs'] {
  if (ms.length === 0) return { mean: null, p50: null, p99: null };
  const sorted = [...ms].sort((a, b) => a - b);
  const at = (q: number) => round(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] ?? 0);
  return { mean: round(ms.reduce((a, b) => a + b, 0) / ms.length), p50: at(0.5), p99: at(0.99) };
}

const round = (ms: number) => Math.round(ms * 10) / 10;

/**
 * The summaries of several workers as one: counts added, the mean weighted by requests,
 * p50 and p99 the highest worker's (percentiles do not add up), the newest last error.
 */
export function mergeSummaries(
  all: readonly Record<string, UpstreamSummary>[],
): Record<string, UpstreamSummary> {
  const out: Record<string, UpstreamSummary> = {};
  for (const summaries of all) {
    for (const [name, s] of Object.entries(summaries)) {
      const m = out[name];
      if (m === undefined) {
        out[name] = { ...s, statuses: { ...s.statuses }, latencyMs: { ...s.latencyMs } };
        continue;
      }
      const requests = m.requests + s.requests;
      const mean =
        requests === 0
          ? null
          : round(((m.latencyMs.mean ?? 0) * m.requests + (s.latencyMs.mean ?? 0) * s.requests) / requests);
      const max = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.max(a, b));
      for (const [cls, n] of Object.entries(s.statuses)) m.statuses[cls] = (m.statuses[cls] ?? 0) + n;
      m.latencyMs = {
        mean,
        p50: max(m.latencyMs.p50, s.latencyMs.p50),
        p99: max(m.latencyMs.p99, s.latencyMs.p99),
      };
      m.requests = requests;
      m.errors += s.errors;
      if (s.lastError !== null && (m.lastError === null || s.lastError.time > m.lastError.time))
        m.lastError = s.lastError;
      if (s.from < m.from) m.from = s.from;
    }
  }
  return out;
}
