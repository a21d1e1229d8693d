// paused-owner.mjs for `kind: postgres` row routes: the same lock owner in its own
// process (built client SDK, auto-renew, so its renewals stop with it when SIGSTOPped),
// but each write is a row: PUT {path} with body {tok, writer, req} (its token, its owner
// name, the write's request id), so an audit trigger on the table can record who wrote.
// Acquires, writes once, says "ready", waits for one line on stdin (written while it is
// stopped, read the moment it is continued), then writes again with its old token.
// Every grant and write is reported as a JSON line on stdout.
//
// argv[2]: JSON {control, data, path, lock, owner, ttlMs, autoRenew, runId}
import { createInterface } from 'node:readline';
import { FencegateClient, withFencingToken } from '../../../dist/client/index.js';

const cfg = JSON.parse(process.argv[2]);
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
let n = 0;

async function write(lock, label) {
  const requestId = `${cfg.runId}-${cfg.owner}-${++n}`;
  const init = withFencingToken(
    {
      method: 'PUT',
      headers: { 'content-type': 'application/json', 'x-request-id': requestId, 'x-client-id': cfg.owner },
      body: JSON.stringify({ tok: lock.fencingToken, writer: cfg.owner, req: requestId }),
      signal: AbortSignal.timeout(20_000),
    },
    lock.fencingToken,
  );
  let status;
  let body;
  try {
    const res = await fetch(`${cfg.data}${cfg.path}`, init);
    status = res.status;
    const text = await res.text();
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  } catch (err) {
    status = err?.name === 'TimeoutError' ? 'timeout' : 'error';
    body = String(err);
  }
  const acknowledged = typeof status === 'number' && status >= 200 && status < 300;
  emit({
    event: 'op',
    label,
    body,
    op: { lock: cfg.lock, token: lock.fencingToken, writer: cfg.owner, requestId, status, acknowledged },
  });
}

try {
  const client = new FencegateClient({ url: cfg.control, requestTimeoutMs: 10_000 });
  const lock = await client.acquire(cfg.lock, {
    owner: cfg.owner,
    ttlMs: cfg.ttlMs,
    waitMs: 10_000,
    autoRenew: cfg.autoRenew,
  });
  emit({
    event: 'grant',
    grant: { lock: cfg.lock, token: lock.fencingToken, owner: cfg.owner, leaseId: lock.leaseId },
  });
  await write(lock, 'before-pause');
  emit({ event: 'ready' });
  await lines.next(); // blocks here while stopped; the line is waiting when we continue
  await write(lock, 'after-pause');
  await new Promise((r) => setTimeout(r, 50));
  emit({ event: 'done', leaseLostLocally: lock.lost });
  process.exit(0);
} catch (err) {
  emit({ event: 'fatal', error: String(err?.stack ?? err) });
  process.exit(1);
}
