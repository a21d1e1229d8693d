// A queued waiter in its own process, so a test can kill -9 it the moment it is granted
// (a worker that dies holding the lock). It uses the built client SDK (dist/client),
// acquires once with waitMs and no auto-renewal, and reports the grant as a JSON line:
// the lease as the issuer answered it (expiresAt and ttlMs on the store's clock). Then it
// idles until killed. A refusal is reported as {event: 'refused'} and the process exits.
//
// argv[2]: JSON {control, lock, owner, ttlMs, waitMs}
import { FencegateClient } from '../../../dist/client/index.js';

const cfg = JSON.parse(process.argv[2]);
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

// The issuer's own answer, to report the store-clock times of the lease.
let answered = null;
const recordingFetch = async (input, init) => {
  const res = await fetch(input, init);
  if (String(input).endsWith('/acquire') && res.ok) answered = await res.clone().json();
  return res;
};

try {
  const client = new FencegateClient({ url: cfg.control, fetch: recordingFetch, requestTimeoutMs: 10_000 });
  emit({ event: 'started' });
  const lock = await client.acquire(cfg.lock, {
    owner: cfg.owner,
    ttlMs: cfg.ttlMs,
    waitMs: cfg.waitMs,
    autoRenew: false,
  });
  emit({ event: 'grant', token: lock.fencingToken, leaseId: lock.leaseId, lease: answered });
  setInterval(() => undefined, 60_000); // hold the lock until killed
} catch (err) {
  emit({ event: 'refused', error: String(err?.stack ?? err), name: err?.name });
  process.exit(0);
}
