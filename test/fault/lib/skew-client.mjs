// A client process for the clock-skew test, meant to run under libfaketime. It
// acquires a lock with the built SDK (dist/client), waiting in the queue, reports what
// its Lock believes, then on "write <url> <requestId>" on stdin PUTs with its token
// (plain fetch + Fencing-Token, so the fence, not the client, decides) and reports
// the status. Exits on "exit" or after 60 s (monotonic) at the latest.
// argv: control key owner ttlMs waitMs
import { createInterface } from 'node:readline';
import { FencegateClient, withFencingToken } from '../../../dist/client/index.js';

const [control, key, owner, ttlMs, waitMs] = process.argv.slice(2);
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const bail = setTimeout(() => process.exit(3), 60_000);

const fg = new FencegateClient({ url: control });
say({ event: 'acquiring', wall: Date.now() });
const lock = await fg.acquire(key, { owner, ttlMs: Number(ttlMs), waitMs: Number(waitMs), autoRenew: false });
say({
  event: 'acquired',
  token: lock.fencingToken,
  remainingMs: lock.remainingMs,
  lost: lock.lost,
  wall: Date.now(),
});
lock.signal.addEventListener('abort', () => say({ event: 'lost' }));

for await (const line of createInterface({ input: process.stdin })) {
  const [cmd, url, requestId] = line.trim().split(' ');
  if (cmd === 'state')
    say({ event: 'state', remainingMs: lock.remainingMs, lost: lock.lost, wall: Date.now() });
  if (cmd === 'write') {
    const res = await fetch(
      url,
      withFencingToken(
        {
          method: 'PUT',
          headers: { 'content-type': 'application/json', 'x-request-id': requestId, 'x-client-id': owner },
          body: JSON.stringify({ owner }),
          signal: AbortSignal.timeout(15_000),
        },
        lock.fencingToken,
      ),
    ).catch((err) => ({ status: String(err) }));
    say({ event: 'wrote', status: res.status, lost: lock.lost, remainingMs: lock.remainingMs });
  }
  if (cmd === 'exit') break;
}
clearTimeout(bail);
process.exit(0);
