// A lock owner whose event loop stalls (a long GC, a CPU-bound step): it uses the built
// client SDK (dist/client) with auto-renewal, writes once through the gateway with
// lock.fetch, says "ready", and on a line "stall" busy-waits stallMs without yielding, so
// neither its renewal nor its deadline timer can run. Right after the stall it reports
// what the SDK says (lost, throwIfLost, remainingMs) and tries one more lock.fetch: that
// write must not be sent. Every grant and write is reported as a JSON line on stdout.
//
// argv[2]: JSON {control, data, path, lock, owner, ttlMs, stallMs, runId}
import { createInterface } from 'node:readline';
import { FencegateClient } from '../../../dist/client/index.js';

const cfg = JSON.parse(process.argv[2]);
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
let n = 0;

async function write(lock, label) {
  const requestId = `${cfg.runId}-${cfg.owner}-${++n}`;
  let status;
  let error = null;
  try {
    const res = await lock.fetch(`${cfg.data}${cfg.path}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', 'x-request-id': requestId, 'x-client-id': cfg.owner },
      body: JSON.stringify({ by: cfg.owner, label }),
    });
    status = res.status;
    await res.text();
  } catch (err) {
    // The gateway's fence refusals are thrown typed (StaleTokenError, …) with their status.
    status = typeof err?.status === 'number' && err.status > 0 ? err.status : 'error';
    error = err?.name ?? String(err);
  }
  const acknowledged = typeof status === 'number' && status >= 200 && status < 300;
  emit({
    event: 'op',
    label,
    error,
    op: { lock: cfg.lock, token: lock.fencingToken, writer: cfg.owner, requestId, status, acknowledged },
  });
}

try {
  const client = new FencegateClient({ url: cfg.control, requestTimeoutMs: 10_000 });
  const lock = await client.acquire(cfg.lock, { owner: cfg.owner, ttlMs: cfg.ttlMs, autoRenew: true });
  emit({
    event: 'grant',
    grant: { lock: cfg.lock, token: lock.fencingToken, owner: cfg.owner, leaseId: lock.leaseId },
  });
  await write(lock, 'before-stall');
  emit({ event: 'ready' });
  await lines.next();
  const end = performance.now() + cfg.stallMs;
  while (performance.now() < end) {
    // busy: no timer, no I/O callback runs
  }
  // First thing after the stall, before any timer had a chance to run.
  const lost = lock.lost;
  const remainingMs = lock.remainingMs;
  let thrown = null;
  try {
    lock.throwIfLost();
  } catch (err) {
    thrown = err?.name ?? String(err);
  }
  await write(lock, 'after-stall');
  emit({ event: 'done', lost, remainingMs, thrown });
  process.exit(0);
} catch (err) {
  emit({ event: 'fatal', error: String(err?.stack ?? err) });
  process.exit(1);
}
