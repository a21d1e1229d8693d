// Child process of test/fault/embedded-kill9.test.ts: opens the embedded store
// from the *built* code (dist/; `npm run build` first) and grants, fences and
// releases one lock in a loop, printing one JSON line per acknowledged step
// (stdout to a pipe is synchronous on Linux: a printed line was acknowledged).
//
// usage: node sql-kill9-child.mjs DIR [LAST_REQUEST_ID]
//   prints {"event":"open","state":…}        the lock as found after (re)opening
//          {"event":"replay",…}              replay of LAST_REQUEST_ID, if given
//          {"event":"grant","token",…}       then, forever: grant → admitted → released
import { openEmbeddedStore } from '../../dist/store/lmdb/store.js';

const [dir, lastRequestId] = process.argv.slice(2);
if (!dir) throw new Error('usage: sql-kill9-child.mjs DIR [LAST_REQUEST_ID]');
const KEY = 'kill9';
const OWNER = 'grinder';
const say = (obj) =>
  process.stdout.write(`${JSON.stringify(obj, (_, v) => (typeof v === 'bigint' ? v.toString() : v))}\n`);

const store = await openEmbeddedStore(dir);
const state = await store.inspect(KEY);
say({ event: 'open', state });

if (lastRequestId) {
  const r = await store.tryAcquire({ key: KEY, owner: OWNER, ttlMs: 60_000, requestId: lastRequestId });
  say({
    event: 'replay',
    ok: r.ok,
    reason: r.ok ? null : r.reason,
    replayed: r.ok && r.replayed,
    token: r.ok ? r.lease.token : r.reason === 'replay-ended' ? r.token : null,
    leaseId: r.ok ? r.lease.leaseId : r.reason === 'replay-ended' ? r.leaseId : null,
  });
}
// A lease left by the killed incarnation: release it so the loop can go on.
const now = await store.inspect(KEY);
if (now?.held && now.leaseId) await store.release(KEY, now.leaseId);

for (let i = 0; ; i++) {
  const requestId = `${process.pid}-${i}`;
  const r = await store.tryAcquire({ key: KEY, owner: OWNER, ttlMs: 60_000, requestId });
  if (!r.ok) throw new Error(`unexpected refusal: ${JSON.stringify(r)}`);
  say({ event: 'grant', token: r.lease.token, leaseId: r.lease.leaseId, requestId });
  const a = await store.admit({
    lock: KEY,
    token: r.lease.token,
    check: 'lease',
    requestId,
    session: 'kill9-child',
    record: true,
  });
  if (!a.ok) throw new Error(`unexpected admit refusal: ${JSON.stringify(a)}`);
  say({ event: 'admitted', token: r.lease.token });
  await store.finish(KEY, requestId);
  const rel = await store.release(KEY, r.lease.leaseId);
  if (!rel.ok) throw new Error('unexpected release refusal');
  say({ event: 'released', token: r.lease.token });
}
