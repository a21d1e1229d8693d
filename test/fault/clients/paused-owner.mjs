// A lock owner in its own process, so a test can SIGSTOP it (a GC pause, a VM stall).
// It uses the built client SDK (dist/client): acquires, writes once through the gateway,
// says "ready", then waits for one line on stdin. The test writes that line while the
// process is stopped, so the process reads it the moment it is continued and sends its
// next write at once, with the token it had before the pause — as a paused owner does,
// not knowing it was paused. Every grant and write is reported as a JSON line on stdout.
//
// argv[2]: JSON {control, data, path, lock, owner, ttlMs, autoRenew, runId, sequencer?}
// With `sequencer: true` every write also carries the lease's Fencing-Sequencer (as it
// stood before the pause), and the grant line reports it.
import { createInterface } from 'node:readline';
import { FencegateClient, withFencingSequencer, withFencingToken } from '../../../dist/client/index.js';

const cfg = JSON.parse(process.argv[2]);
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
let n = 0;

async function write(lock, label) {
  const requestId = `${cfg.runId}-${cfg.owner}-${++n}`;
  const tokenOnly = withFencingToken(
    {
      method: 'PUT',
      headers: { 'content-type': 'application/json', 'x-request-id': requestId, 'x-client-id': cfg.owner },
      // `row: true` (a `kind: postgres` row route): the row records who wrote, with which
      // token, in which request, so an audit trigger on the table can tell them apart.
      body: JSON.stringify(
        cfg.row ? { tok: lock.fencingToken, writer: cfg.owner, req: requestId } : { by: cfg.owner, label },
      ),
      signal: AbortSignal.timeout(20_000),
    },
    lock.fencingToken,
  );
  const init = cfg.sequencer ? withFencingSequencer(tokenOnly, lock.sequencer) : tokenOnly;
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
    ...(cfg.sequencer ? { sequencer: lock.sequencer } : {}),
  });
  await write(lock, 'before-pause');
  emit({ event: 'ready' });
  await lines.next(); // blocks here while stopped; the line is waiting when we continue
  await write(lock, 'after-pause');
  // What the SDK itself concluded once its timers ran again (the deadline or a failed renewal).
  await new Promise((r) => setTimeout(r, 50));
  emit({ event: 'done', leaseLostLocally: lock.lost });
  process.exit(0);
} catch (err) {
  emit({ event: 'fatal', error: String(err?.stack ?? err) });
  process.exit(1);
}
