-- The statements of the Postgres store, one per `-- name:` section. {schema} is
-- the quoted schema name. Every parameter carries an explicit cast (they were
-- shared with PGlite once, which infers types differently from pg; kept explicit).
-- Every bigint comes back as text and becomes a bigint in TypeScript: tokens
-- exceed 2^53. Times are store-clock ms ({schema}.now_ms()).
--
-- Operations that decide on a key's state run in one transaction that first
-- locks the key's row (ensure_key, or fence_batch_v2's locking read), then reads,
-- then writes; so concurrent processes are serialised per key.

-- name: init_lock
-- Serialises schema creation across processes. $1 namespace.
SELECT pg_advisory_xact_lock(hashtextextended('fencegate:schema:' || $1::text, 0));

-- name: schema_version
SELECT value FROM {schema}.meta WHERE name = 'schema_version';

-- name: ensure_key
-- Creates the key's row (floor = store clock × 1000) or, if it exists, locks it:
-- ON CONFLICT DO UPDATE … WHERE false locks the existing row without writing it.
-- $1 key
INSERT INTO {schema}.locks AS l (key, floor)
VALUES ($1::text, {schema}.now_ms() * 1000)
ON CONFLICT (key) DO UPDATE SET floor = l.floor WHERE false;

-- name: acquire_context
-- Read after the row is locked, so now is taken after any wait for the lock.
-- $1 key, $2 request id (NULL: none), $3 owner, $4 the locks table verified (check_identity)
SELECT n.now::text         AS now,
       e.floor::text       AS epoch_floor,
       l.floor::text       AS key_floor,
       l.issued::text      AS issued,
       l.lease_id,
       l.owner,
       l.token::text       AS token,
       l.ttl_ms::text      AS ttl_ms,
       l.expires_at::text  AS expires_at,
       g.lease_id          AS replay_lease_id,
       g.token::text       AS replay_token,
       g.ttl_ms::text      AS replay_ttl_ms,
       g.expires_at::text  AS replay_expires_at,
       g.took_over         AS replay_took_over,
       h.waiter_id         AS head_waiter_id,
       h.deadline::text    AS head_deadline
  FROM (SELECT {schema}.now_ms() AS now WHERE {schema}.check_identity($4::oid)) n
  JOIN {schema}.locks l ON l.key = $1::text
  LEFT JOIN {schema}.epoch e ON true
  LEFT JOIN {schema}.grants g
         ON g.key = $1::text AND g.request_id = $2::text AND g.owner = $3::text AND g.keep_until > n.now
  LEFT JOIN LATERAL (
        SELECT w.waiter_id, w.deadline
          FROM {schema}.waiters w
         WHERE w.key = $1::text AND w.deadline > n.now
         ORDER BY w.seq
         LIMIT 1) h ON true;

-- name: grant
-- Mints the next token (above the key's last token or floor, and above the epoch
-- floor), installs the lease, records the request id, removes the winning waiter,
-- prunes the key's expired waiters and idempotency records, and deletes up to two
-- expired idempotency records of other keys: each grant adds at most one record, so
-- the cleanup keeps pace with any grant rate (SKIP LOCKED: it never waits on another
-- key). Notifies the key's watchers at commit, so the waiters behind the winner
-- re-read the new lease's expiry.
-- Records who got the token (grant_owners) and trims the key's older records to the
-- last $11 grants.
-- $1 key, $2 lease id, $3 owner, $4 ttl ms, $5 now, $6 request id (NULL: none),
-- $7 waiter id (NULL: none), $8 took over a lapsed lease, $9 keep record until,
-- $10 channel, $11 grants remembered per key (≥ 2)
WITH minted AS (
  UPDATE {schema}.locks l
     SET issued     = greatest(coalesce(l.issued, l.floor), coalesce((SELECT e.floor FROM {schema}.epoch e), 0)) + 1,
         token      = greatest(coalesce(l.issued, l.floor), coalesce((SELECT e.floor FROM {schema}.epoch e), 0)) + 1,
         lease_id   = $2::text,
         owner      = $3::text,
         ttl_ms     = $4::bigint,
         expires_at = $5::bigint + $4::bigint
   WHERE l.key = $1::text
  RETURNING l.token, l.expires_at
), recorded AS (
  INSERT INTO {schema}.grants AS g (key, request_id, owner, lease_id, token, ttl_ms, expires_at, took_over, keep_until)
  SELECT $1::text, $6::text, $3::text, $2::text, m.token, $4::bigint, m.expires_at, $8::boolean, $9::bigint
    FROM minted m
   WHERE $6::text IS NOT NULL
  ON CONFLICT (key, request_id, owner) DO UPDATE
     SET lease_id = excluded.lease_id, token = excluded.token, ttl_ms = excluded.ttl_ms,
         expires_at = excluded.expires_at, took_over = excluded.took_over, keep_until = excluded.keep_until
), pruned_grants AS (
  DELETE FROM {schema}.grants
   WHERE key = $1::text AND keep_until <= $5::bigint AND request_id IS DISTINCT FROM $6::text
), trimmed_grants AS (
  DELETE FROM {schema}.grants
   WHERE (key, request_id, owner) IN (
         SELECT key, request_id, owner FROM {schema}.grants
          WHERE keep_until <= $5::bigint AND key <> $1::text
          ORDER BY keep_until
          LIMIT 2 FOR UPDATE SKIP LOCKED)
), dequeued AS (
  DELETE FROM {schema}.waiters
   WHERE key = $1::text AND (waiter_id = $7::text OR deadline <= $5::bigint)
), owned AS (
  INSERT INTO {schema}.grant_owners (key, token, owner)
  SELECT $1::text, m.token, $3::text FROM minted m
  ON CONFLICT (key, token) DO UPDATE SET owner = excluded.owner
), forgotten AS (
  -- Sees the rows before this statement: keeps the newest $11 - 1 and the one added above.
  DELETE FROM {schema}.grant_owners
   WHERE key = $1::text
     AND token < (SELECT o.token FROM {schema}.grant_owners o WHERE o.key = $1::text
                   ORDER BY o.token DESC OFFSET $11::int - 2 LIMIT 1)
)
SELECT m.token::text AS token, m.expires_at::text AS expires_at
  FROM minted m, (SELECT pg_notify($10::text, $1::text)) n;

-- name: renew
-- Only the current lease, and only while it is live by the store clock: a lapsed
-- lease is never resurrected, nor one whose token an epoch bump put at or below the
-- floor. One statement: the row lock is implicit, and now_ms() is evaluated again if the
-- statement had to wait for it.
-- $1 key, $2 lease id, $3 ttl ms, $4 the locks table verified (check_identity)
UPDATE {schema}.locks
   SET expires_at = {schema}.now_ms() + $3::bigint,
       ttl_ms     = $3::bigint
 WHERE key = $1::text AND lease_id = $2::text AND expires_at > {schema}.now_ms()
   AND token > coalesce((SELECT e.floor FROM {schema}.epoch e), 0)
   AND {schema}.check_identity($4::oid)
RETURNING owner, token::text AS token, expires_at::text AS expires_at;

-- name: release
-- Clears the lease with this id, live or lapsed (not yet replaced), and notifies.
-- $1 key, $2 lease id, $3 channel → released: 1 or 0
WITH released AS (
  UPDATE {schema}.locks
     SET lease_id = NULL, owner = NULL, token = NULL, ttl_ms = NULL, expires_at = NULL
   WHERE key = $1::text AND lease_id = $2::text
  RETURNING key
)
SELECT count(*)::int AS released FROM (SELECT pg_notify($3::text, key) FROM released) x;

-- name: inspect
-- $1 key
SELECT n.now::text        AS now,
       l.key,
       l.issued::text     AS issued,
       l.highest::text    AS highest,
       l.shadow_highest::text AS shadow_highest,
       l.lease_id,
       l.owner,
       l.token::text      AS token,
       l.expires_at::text AS expires_at,
       (SELECT count(*) FROM {schema}.waiters w WHERE w.key = l.key AND w.deadline > n.now)::int AS waiters,
       coalesce((SELECT e.floor FROM {schema}.epoch e), 0)::text AS epoch_floor
  FROM (SELECT {schema}.now_ms() AS now) n
  JOIN {schema}.locks l ON l.key = $1::text;

-- name: list_locks
-- Keys with a live lease or live waiters (and a token issued), in byte order of the
-- key (COLLATE "C", as the Redis store sorts), that start with $2 and come after $3.
-- $1 limit, $2 prefix ('' = all), $3 after (NULL = from the start)
WITH n AS (SELECT {schema}.now_ms() AS now),
keys AS (
  SELECT l.key FROM {schema}.locks l, n WHERE l.lease_id IS NOT NULL AND l.expires_at > n.now
  UNION
  SELECT w.key FROM {schema}.waiters w, n WHERE w.deadline > n.now
)
SELECT n.now::text        AS now,
       l.key,
       l.issued::text     AS issued,
       l.highest::text    AS highest,
       l.shadow_highest::text AS shadow_highest,
       l.lease_id,
       l.owner,
       l.token::text      AS token,
       l.expires_at::text AS expires_at,
       (SELECT count(*) FROM {schema}.waiters w WHERE w.key = l.key AND w.deadline > n.now)::int AS waiters,
       coalesce((SELECT e.floor FROM {schema}.epoch e), 0)::text AS epoch_floor
  FROM keys k
  JOIN {schema}.locks l ON l.key = k.key
 CROSS JOIN n
 WHERE l.issued IS NOT NULL
   AND starts_with(l.key, $2::text)
   AND ($3::text IS NULL OR l.key COLLATE "C" > $3::text COLLATE "C")
 ORDER BY l.key COLLATE "C"
 LIMIT $1::int;

-- name: recent_grants
-- The key's remembered grants, newest first. $1 key
SELECT token::text AS token, owner
  FROM {schema}.grant_owners
 WHERE key = $1::text
 ORDER BY token DESC;

-- name: enqueue_waiter
-- Runs after ensure_key. A live waiter that enqueues again keeps its place; an
-- expired one goes to the back. Also prunes the key's other expired waiters.
-- $1 key, $2 waiter id, $3 wait ms
WITH pruned AS (
  DELETE FROM {schema}.waiters
   WHERE key = $1::text AND deadline <= {schema}.now_ms() AND waiter_id <> $2::text
)
INSERT INTO {schema}.waiters AS w (key, waiter_id, deadline)
VALUES ($1::text, $2::text, {schema}.now_ms() + greatest($3::bigint, 0))
ON CONFLICT (key, waiter_id) DO UPDATE
   SET deadline = excluded.deadline,
       seq      = CASE WHEN w.deadline > {schema}.now_ms() THEN w.seq ELSE excluded.seq END;

-- name: remove_waiter
-- $1 key, $2 waiter id, $3 channel
WITH removed AS (
  DELETE FROM {schema}.waiters WHERE key = $1::text AND waiter_id = $2::text
)
SELECT count(*)::int AS notified FROM (SELECT pg_notify($3::text, $1::text)) x;

-- name: fence_batch
-- Finishes, then admissions judged in array order, in one statement (schema.sql:
-- fence_batch_v2). $1 finished locks, $2 their request ids; per admission: $3 lock,
-- $4 token, $5 lease check, $6 request id, $7 session id, $8 record ('t' | 's' | 'f'),
-- $9 delivery bound ms; $10 channel; $11 the locks table verified (check_identity)
-- → one row per admission, in order: verdict ok | stale | forged | lease-expired.
SELECT ord, verdict, highest, lower_inflight, epoch_id, epoch_floor
  FROM {schema}.fence_batch_v2($1::text[], $2::text[], $3::text[], $4::bigint[], $5::boolean[],
                               $6::text[], $7::text[], $8::text[], $9::bigint[], $10::text, $11::oid);

-- name: deliver
-- Marks an in-flight entry as delivering with its bound, before its write is sent.
-- $1 lock, $2 request id, $3 bound ms → delivering: 1 when the entry exists, else 0
WITH d AS (
  UPDATE {schema}.inflight SET bound_ms = $3::bigint
   WHERE lock = $1::text AND request_id = $2::text
  RETURNING 1
)
SELECT (SELECT count(*) FROM d)::int AS delivering;

-- name: lower_inflight
-- The lock's in-flight entries below $2 that still count (their session exists, or
-- their write was delivering: bound_ms > 0), their sessions (space-separated; ids
-- never contain spaces) and, per session in the same order, the largest bound among
-- them. $1 lock, $2 token
SELECT coalesce(sum(e.n), 0)::int                                 AS count,
       coalesce(string_agg(e.session_id, ' ' ORDER BY e.session_id), '') AS sessions,
       coalesce(string_agg(e.bound::text, ' ' ORDER BY e.session_id), '') AS bounds
  FROM (SELECT i.session_id, count(*) AS n, max(i.bound_ms) AS bound
          FROM {schema}.inflight i
          LEFT JOIN {schema}.gateway_sessions s ON s.id = i.session_id
         WHERE i.lock = $1::text AND i.token < $2::bigint AND (s.id IS NOT NULL OR i.bound_ms > 0)
         GROUP BY i.session_id) e;

-- name: drop_inflight
-- Removes the lock's entries owned by the given (ended) sessions whose delivery bound
-- is at most $4, and notifies.
-- $1 lock, $2 session ids (space-separated), $3 channel, $4 max bound ms
WITH dropped AS (
  DELETE FROM {schema}.inflight
   WHERE lock = $1::text AND session_id = ANY (string_to_array($2::text, ' '))
     AND bound_ms <= $4::bigint
  RETURNING 1
)
SELECT count(*)::int AS notified
  FROM (SELECT pg_notify($3::text, $1::text) WHERE EXISTS (SELECT 1 FROM dropped)) x;

-- name: idem_begin
-- Begins a request under an idempotency key (Store.beginIdempotent): takes the key when
-- its row is absent or no longer live, else reports the live row. $1 key, $2 fingerprint,
-- $3 attempt, $4 hold ms → state begun | mismatch | in-flight | done, retry_after (ms of
-- the hold left), response (base64). No row: a concurrent begin committed the key after
-- this statement's snapshot was taken; the caller runs it again.
WITH ins AS (
  INSERT INTO {schema}.idempotency AS r (key, fingerprint, attempt, until, response)
  VALUES ($1::text, $2::text, $3::text, {schema}.now_ms() + $4::bigint, NULL)
  ON CONFLICT (key) DO UPDATE
     SET fingerprint = excluded.fingerprint, attempt = excluded.attempt,
         until = excluded.until, response = NULL
   WHERE r.until <= {schema}.now_ms()
  RETURNING 1
)
SELECT 'begun'::text AS state, NULL::bigint AS retry_after, NULL::text AS response FROM ins
UNION ALL
SELECT CASE WHEN r.fingerprint <> $2::text THEN 'mismatch'
            WHEN r.response IS NULL THEN 'in-flight' ELSE 'done' END,
       greatest(1, r.until - {schema}.now_ms()),
       CASE WHEN r.fingerprint = $2::text THEN encode(r.response, 'base64') END
  FROM {schema}.idempotency r
 WHERE r.key = $1::text AND r.until > {schema}.now_ms() AND NOT EXISTS (SELECT 1 FROM ins);

-- name: idem_finish
-- Stores the response of the attempt that holds the key in flight, kept for the ttl.
-- $1 key, $2 attempt, $3 response (base64), $4 ttl ms → stored: 1, or 0 (nothing changed)
WITH f AS (
  UPDATE {schema}.idempotency
     SET attempt = NULL, response = decode($3::text, 'base64'), until = {schema}.now_ms() + $4::bigint
   WHERE key = $1::text AND attempt = $2::text AND response IS NULL
  RETURNING 1
)
SELECT (SELECT count(*) FROM f)::int AS stored;

-- name: idem_abandon
-- Removes the row if the attempt holds it in flight. $1 key, $2 attempt
DELETE FROM {schema}.idempotency WHERE key = $1::text AND attempt = $2::text AND response IS NULL;

-- name: session_open
-- $1 id, $2 ttl ms
INSERT INTO {schema}.gateway_sessions (id, beat, ttl_ms, started_at)
VALUES ($1::text, 0, $2::bigint, {schema}.now_ms());

-- name: session_beat
-- Increments the beat if the session still exists. $1 id
WITH b AS (
  UPDATE {schema}.gateway_sessions SET beat = beat + 1 WHERE id = $1::text RETURNING 1
)
SELECT (SELECT count(*) FROM b)::int AS alive, {schema}.now_ms()::text AS now;

-- name: session_read
-- $1 ids (space-separated), or NULL for all
SELECT id, beat::text AS beat, ttl_ms::text AS ttl_ms
  FROM {schema}.gateway_sessions
 WHERE $1::text IS NULL OR id = ANY (string_to_array($1::text, ' '));

-- name: session_end
-- Ends the session if its beat is still $2 (NULL: unconditionally), removes its
-- in-flight entries that were not delivering (the delivering ones count on: lock-delay)
-- and notifies each lock that had one.
-- $1 id, $2 expected beat or NULL, $3 channel
WITH ended AS (
  DELETE FROM {schema}.gateway_sessions
   WHERE id = $1::text AND ($2::bigint IS NULL OR beat = $2::bigint)
  RETURNING id
), dropped AS (
  DELETE FROM {schema}.inflight i USING ended e
   WHERE i.session_id = e.id AND i.bound_ms = 0 RETURNING i.lock
)
SELECT (SELECT count(*) FROM ended)::int AS ended,
       (SELECT count(*) FROM (SELECT pg_notify($3::text, d.lock)
                                FROM (SELECT DISTINCT lock FROM dropped) d) x)::int AS notified;

-- name: identity
-- What identifies the store now, and the epoch with the identity that verified it last
-- (locked: one process at a time decides). '<system identifier>:<timeline>:<locks oid>'.
SELECT (SELECT system_identifier FROM pg_control_system())::text || ':' ||
       (SELECT timeline_id FROM pg_control_checkpoint())::text || ':' ||
       to_regclass('{schema}.locks')::oid::text AS current,
       e.id, e.floor::text AS floor, e.identity AS recorded,
       {schema}.now_ms()::text AS now
  FROM {schema}.epoch e
   FOR UPDATE OF e;

-- name: epoch_set
-- Sets the epoch after a verification. $1 id, $2 floor, $3 identity
UPDATE {schema}.epoch SET id = $1::text, floor = $2::bigint, identity = $3::text,
       started_at = CASE WHEN id = $1::text THEN started_at ELSE {schema}.now_ms() END;

-- name: inflight_forget
-- After verify found the tables are not the ones it verified last (a restore): the
-- in-flight entries are the backup's (writes finished since, or of sessions that go on
-- and never finish them again): forgotten; the gateways' reset hold (the lock-delay)
-- stands in for the drain barrier of writes delivered before the restore.
DELETE FROM {schema}.inflight;

-- name: bump_epoch
-- New epoch id; floor raised to the store clock × 1000, never lowered. $1 new id
INSERT INTO {schema}.epoch AS e (id, floor, started_at)
VALUES ($1::text, {schema}.now_ms() * 1000, {schema}.now_ms())
ON CONFLICT (singleton) DO UPDATE
   SET id = excluded.id, floor = greatest(e.floor, excluded.floor), started_at = excluded.started_at
RETURNING id, floor::text AS floor;

-- name: health
SELECT {schema}.now_ms()::text AS now, e.id, e.floor::text AS floor
  FROM (SELECT 1) one
  LEFT JOIN {schema}.epoch e ON true;

-- name: durability
-- The server settings a crash-safe store needs (Postgres only; reported by health()).
SELECT current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit;

-- name: now
SELECT {schema}.now_ms()::text AS now;

-- name: prune
-- Deletes up to $1 expired rows of each housekeeping table, skipping rows another
-- transaction holds (never waits, never deadlocks).
WITH g AS (
  DELETE FROM {schema}.grants
   WHERE (key, request_id, owner) IN (
         SELECT key, request_id, owner FROM {schema}.grants
          WHERE keep_until <= {schema}.now_ms() LIMIT $1::int FOR UPDATE SKIP LOCKED)
  RETURNING 1
), w AS (
  DELETE FROM {schema}.waiters
   WHERE (key, waiter_id) IN (
         SELECT key, waiter_id FROM {schema}.waiters
          WHERE deadline <= {schema}.now_ms() LIMIT $1::int FOR UPDATE SKIP LOCKED)
  RETURNING 1
), i AS (
  -- entries whose session has ended (session_end removes them; this catches leftovers);
  -- a delivering entry is left to the gateway that watches it for its bound
  DELETE FROM {schema}.inflight
   WHERE (lock, request_id) IN (
         SELECT lock, request_id FROM {schema}.inflight f
          WHERE f.bound_ms = 0
            AND NOT EXISTS (SELECT 1 FROM {schema}.gateway_sessions s WHERE s.id = f.session_id)
          LIMIT $1::int FOR UPDATE SKIP LOCKED)
  RETURNING 1
), d AS (
  DELETE FROM {schema}.idempotency
   WHERE key IN (
         SELECT key FROM {schema}.idempotency
          WHERE until <= {schema}.now_ms() LIMIT $1::int FOR UPDATE SKIP LOCKED)
  RETURNING 1
)
SELECT (SELECT count(*) FROM g)::int AS grants,
       (SELECT count(*) FROM w)::int AS waiters,
       (SELECT count(*) FROM i)::int AS inflight,
       (SELECT count(*) FROM d)::int AS idempotency;
