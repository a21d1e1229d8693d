// A holder of several locks in its own process (the built client SDK, dist/client), so a
// test can kill -9 it while it holds them: acquires every key at once (acquireMany, with
// background renewal), reports the grant as a JSON line, then idles until killed.
//
// argv[2]: JSON {control, keys, owner, ttlMs}
import { FencegateClient } from '../../../dist/client/index.js';

const cfg = JSON.parse(process.argv[2]);
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

try {
  const client = new FencegateClient({ url: cfg.control, requestTimeoutMs: 10_000 });
  const set = await client.acquireMany(cfg.keys, { owner: cfg.owner, ttlMs: cfg.ttlMs, waitMs: 10_000 });
  emit({
    event: 'grant',
    leaseId: set.leaseId,
    tokens: Object.fromEntries(set.locks.map((l) => [l.key, l.fencingToken])),
  });
  setInterval(() => undefined, 60_000);
} catch (err) {
  emit({ event: 'fatal', error: String(err) });
  process.exit(1);
}
