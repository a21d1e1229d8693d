-- fencegate SQL schema, shared by the Postgres and the embedded (PGlite) store.
--
-- {schema} is replaced by the quoted schema name (the store's namespace). Run as
-- one transaction under pg_advisory_xact_lock (see queries.sql: init_lock), so
-- several processes starting at once create it exactly once. Every statement is
-- idempotent: it runs on every open.
--
-- Times are bigint milliseconds since the Unix epoch on the store's clock
-- (now_ms()); tokens are bigint, always read back as text.

CREATE SCHEMA IF NOT EXISTS {schema};

-- The store clock. clock_timestamp(), not now(): the time when the statement runs,
-- not when its transaction began.
CREATE OR REPLACE FUNCTION {schema}.now_ms() RETURNS bigint
  LANGUAGE sql VOLATILE
  AS $$ SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

CREATE TABLE IF NOT EXISTS {schema}.meta (
  name  text PRIMARY KEY,
  value text NOT NULL
);
-- Version 2: in-flight entries belong to gateway sessions. Version 3: entries carry a
-- delivery bound, and locks a shadow record (the upgrades are ALTERs below, each
-- idempotent). A newer version is left alone, and refused by the check.
INSERT INTO {schema}.meta AS m (name, value) VALUES ('schema_version', '3')
ON CONFLICT (name) DO UPDATE SET value = '3' WHERE m.value IN ('1', '2');

-- The global epoch: one row. Its floor is raised by bumpEpoch() (after restoring a
-- backup); every token minted is above it and admit() refuses tokens at or below
-- it. If the row is missing (state loss), the next open creates it with a floor of
-- the store clock × 1000: above every token the lost state could have issued.
CREATE TABLE IF NOT EXISTS {schema}.epoch (
  singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  id         text    NOT NULL,
  floor      bigint  NOT NULL CHECK (floor >= 0),
  started_at bigint  NOT NULL
);
INSERT INTO {schema}.epoch (id, floor, started_at)
VALUES (gen_random_uuid()::text, {schema}.now_ms() * 1000, {schema}.now_ms())
ON CONFLICT (singleton) DO NOTHING;
-- The store identity that last verified the epoch (docs/adr/0019-store-identity.md):
-- '<system identifier>:<timeline>:<oid of the locks table>'. A restore (new tables), a
-- point-in-time recovery or a promoted replica (a new timeline) or another cluster shows
-- another identity, and the epoch is bumped before anything is granted or admitted.
ALTER TABLE {schema}.epoch ADD COLUMN IF NOT EXISTS identity text;

-- One row per lock key: its token counter, its current lease and the gateway's fence.
-- Every operation on a key locks this row first, so they are serialised per key.
CREATE TABLE IF NOT EXISTS {schema}.locks (
  key        text   PRIMARY KEY,
  -- Key floor: store clock × 1000 when the row was created. The first token is above it.
  floor      bigint NOT NULL,
  -- Highest token minted for the key; NULL while none was (row made by enqueueWaiter).
  issued     bigint,
  -- Highest token admitted by a gateway; NULL while none was.
  highest    bigint,
  -- The current lease, live or lapsed; all NULL when released or never granted.
  lease_id   text,
  owner      text,
  token      bigint,
  ttl_ms     bigint,
  expires_at bigint,
  CHECK ((lease_id IS NULL) = (expires_at IS NULL)),
  CHECK (issued IS NULL OR issued > floor)
);
CREATE INDEX IF NOT EXISTS locks_live ON {schema}.locks (expires_at) WHERE lease_id IS NOT NULL;
-- Highest token admitted by shadow-mode routes (enforce: false); NULL while none was.
-- Apart from the fence: a shadow admission is judged against it and raises it alone.
ALTER TABLE {schema}.locks ADD COLUMN IF NOT EXISTS shadow_highest bigint;

-- Idempotency records: a retried acquire with the same (key, request_id, owner)
-- gets the lease first granted for it. Kept until keep_until (≥ max(ttl, 10 min)).
CREATE TABLE IF NOT EXISTS {schema}.grants (
  key        text    NOT NULL,
  request_id text    NOT NULL,
  owner      text    NOT NULL,
  lease_id   text    NOT NULL,
  token      bigint  NOT NULL,
  ttl_ms     bigint  NOT NULL,
  expires_at bigint  NOT NULL,
  took_over  boolean NOT NULL,
  keep_until bigint  NOT NULL,
  PRIMARY KEY (key, request_id, owner)
);
CREATE INDEX IF NOT EXISTS grants_keep_until ON {schema}.grants (keep_until);

-- FIFO waiter queues. seq orders the queue; it is taken while the key's row is
-- locked, so for one key seq order is commit order. A waiter stops counting at
-- its deadline.
CREATE TABLE IF NOT EXISTS {schema}.waiters (
  key       text      NOT NULL,
  waiter_id text      NOT NULL,
  seq       bigserial NOT NULL,
  deadline  bigint    NOT NULL,
  PRIMARY KEY (key, waiter_id)
);
CREATE INDEX IF NOT EXISTS waiters_queue ON {schema}.waiters (key, seq);
CREATE INDEX IF NOT EXISTS waiters_deadline ON {schema}.waiters (deadline);

-- Writes admitted by a gateway and still in flight to the upstream (drain barrier).
-- An entry has no deadline: it counts until it is finished or until the gateway
-- session that owns it ends (docs/adr/0005-gateway-sessions.md); an entry whose write
-- was delivering (bound_ms > 0: the upstream may take that long to apply it) counts
-- on after its session ended, until a gateway that watched it gone for its bound drops
-- it (docs/adr/0018-lock-delay.md).
CREATE TABLE IF NOT EXISTS {schema}.inflight (
  lock       text   NOT NULL,
  request_id text   NOT NULL,
  token      bigint NOT NULL,
  session_id text   NOT NULL,
  PRIMARY KEY (lock, request_id)
);
-- Schema 1 kept a store-clock deadline per entry instead of a session. Its entries
-- cannot be judged any more and are dropped (upgrade every gateway at once).
ALTER TABLE {schema}.inflight ADD COLUMN IF NOT EXISTS session_id text;
DELETE FROM {schema}.inflight WHERE session_id IS NULL;
ALTER TABLE {schema}.inflight ALTER COLUMN session_id SET NOT NULL;
ALTER TABLE {schema}.inflight DROP COLUMN IF EXISTS deadline;
ALTER TABLE {schema}.inflight ADD COLUMN IF NOT EXISTS bound_ms bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS inflight_lower ON {schema}.inflight (lock, token);
CREATE INDEX IF NOT EXISTS inflight_session ON {schema}.inflight (session_id);

-- Idempotency records of the gateway's Idempotency-Key requests (Store.beginIdempotent):
-- in flight while response IS NULL (held by attempt until `until`), done once it has a
-- response (kept until `until`, attempt NULL). A row whose `until` passed counts as
-- absent; prune deletes it. A table of its own, so older fencegates ignore it.
CREATE TABLE IF NOT EXISTS {schema}.idempotency (
  key         text   PRIMARY KEY,
  fingerprint text   NOT NULL,
  attempt     text,
  until       bigint NOT NULL,
  response    bytea
);
CREATE INDEX IF NOT EXISTS idempotency_until ON {schema}.idempotency (until);

-- Gateway sessions: one per gateway process, kept alive by a heartbeat that bumps
-- beat. Other gateways end a session whose beat they saw unchanged for ttl_ms of
-- their own monotonic clock; ending it removes its in-flight entries that were not
-- delivering.
CREATE TABLE IF NOT EXISTS {schema}.gateway_sessions (
  id         text   PRIMARY KEY,
  beat       bigint NOT NULL DEFAULT 0,
  ttl_ms     bigint NOT NULL CHECK (ttl_ms > 0),
  started_at bigint NOT NULL
);

-- Who was granted which token: the last few grants of each key (GRANT_HISTORY in
-- src/store/types.ts; the grant statement trims older rows of the key). Read only to
-- name the owner of a refused token in events, never to decide anything.
CREATE TABLE IF NOT EXISTS {schema}.grant_owners (
  key        text   NOT NULL,
  token      bigint NOT NULL,
  owner      text   NOT NULL,
  PRIMARY KEY (key, token)
);

-- Raises SQLSTATE FGRST unless the locks table is the one the calling process verified
-- (`expected`, its oid; NULL: not checked): a restore that recreated the tables under a
-- running process stops its grants and admissions until it verified the store again.
CREATE OR REPLACE FUNCTION {schema}.check_identity(expected oid) RETURNS boolean
LANGUAGE plpgsql STABLE
AS $fn$
BEGIN
  IF expected IS NOT NULL AND to_regclass('{schema}.locks')::oid IS DISTINCT FROM expected THEN
    RAISE EXCEPTION 'fencegate: the store''s tables are not the ones this process verified (restored?)'
      USING ERRCODE = 'FGRST';
  END IF;
  RETURN true;
END
$fn$;

-- A gateway's fence operations on a batch, in one statement (one transaction, one
-- commit): first `finish` for each (fin_locks[i], fin_ids[i]), then the admissions
-- (a_* arrays, one element per admission), judged exactly as if run one after
-- another in array order. Batches from src/store/sql/batcher.ts; the rule of an
-- admission lives here, its order of checks in docs/stores-sql.md.
--
-- a_record[i]: 't' an enforced admission (the fence's compare-and-set and an in-flight
-- entry), 's' a shadow-mode admission (judged against the key's shadow record, which it
-- raises; nothing else written), 'f' the verdict only.
--
-- Row locks: the keys of the writing admissions ('t', 's') are locked first, in byte
-- order of the key (COLLATE "C"), so two batches never wait for each other in a cycle;
-- the judgement is a later statement of this function, so (READ COMMITTED, VOLATILE) it
-- reads with a fresh snapshot that sees everything committed before the locks were
-- granted, as the separate lock and read statements of one transaction did before.
-- A writing admission whose key had no row to lock is forged (nothing was issued).
--
-- Per admission i, for its key: floor = greatest(key floor, epoch floor); h = the
-- highest it is judged against: the greater of the fence and the shadow record (both
-- name tokens whose writes reached the upstream: a route switched from shadow to
-- enforced starts from what the shadow period saw), raised by the writing admissions
-- before i in this batch. token ≤ floor → stale; never issued or token > issued → forged; token < h →
-- stale; a_lease[i] and the key's live lease is not this token → lease-expired; else ok.
-- lower_inflight counts the key's entries below the token that still count (their
-- session lives, or their write was delivering: bound_ms > 0), the committed ones and
-- the enforced ones recorded before i in this batch; shadow admissions count none. An
-- enforced admission's entry carries a_bounds[i] when its lower_inflight is 0 (the write
-- leaves at once), else 0. Returns one row per admission, in array order: (ord, verdict,
-- highest, lower_inflight, epoch_id, epoch_floor), highest as text, epoch_id and
-- epoch_floor the global epoch's.
-- `expected`: the locks table the caller verified (check_identity), checked first.
-- Versioned name: a change of meaning is a new function, so gateways of two versions
-- sharing a store each call their own.
CREATE OR REPLACE FUNCTION {schema}.fence_batch_v2(
  fin_locks text[], fin_ids text[],
  a_locks text[], a_tokens bigint[], a_lease boolean[], a_ids text[], a_sessions text[],
  a_record text[], a_bounds bigint[], channel text, expected oid)
RETURNS TABLE (ord int, verdict text, highest text, lower_inflight int, epoch_id text, epoch_floor text)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
  locked text[];
BEGIN
  PERFORM {schema}.check_identity(expected);
  IF cardinality(fin_locks) > 0 THEN
    DELETE FROM {schema}.inflight f
     USING unnest(fin_locks, fin_ids) AS d(lock, request_id)
     WHERE f.lock = d.lock AND f.request_id = d.request_id;
    PERFORM pg_notify(channel, d.lock) FROM (SELECT DISTINCT unnest(fin_locks) AS lock) d;
  END IF;
  IF coalesce(cardinality(a_locks), 0) = 0 THEN
    RETURN;
  END IF;

  SELECT coalesce(array_agg(k.key), '{}') INTO locked
    FROM (SELECT l.key
            FROM {schema}.locks l
           WHERE l.key IN (SELECT u.lock FROM unnest(a_locks, a_record) AS u(lock, rec) WHERE u.rec <> 'f')
           ORDER BY l.key COLLATE "C"
             FOR UPDATE) k;

  RETURN QUERY
  WITH n AS (
    SELECT {schema}.now_ms() AS now,
           coalesce((SELECT e.floor FROM {schema}.epoch e), 0) AS epoch_floor,
           (SELECT e.id FROM {schema}.epoch e) AS epoch_id
  ), req AS (
    SELECT u.ord::int AS ord, u.lock, u.token, u.lease, u.request_id, u.session_id, u.rec, u.bound
      FROM unnest(a_locks, a_tokens, a_lease, a_ids, a_sessions, a_record, a_bounds)
           WITH ORDINALITY AS u(lock, token, lease, request_id, session_id, rec, bound, ord)
  ), ctx AS (
    SELECT r.*,
           l.key IS NOT NULL AND (r.rec = 'f' OR l.key = ANY (locked)) AS found,
           greatest(l.floor, n.epoch_floor) AS floor,
           l.issued,
           greatest(l.highest, l.shadow_highest) AS fence,
           (l.lease_id IS NOT NULL AND l.expires_at > n.now AND l.token = r.token) AS lease_live
      FROM req r
     CROSS JOIN n
      LEFT JOIN {schema}.locks l ON l.key = r.lock
  ), passing AS (
    -- Passes every check that does not depend on the other admissions of the batch.
    SELECT c.*,
           c.found AND c.token > c.floor AND c.issued IS NOT NULL AND c.token <= c.issued
             AND (NOT c.lease OR coalesce(c.lease_live, false)) AS passes
      FROM ctx c
  ), running AS (
    -- The highest when i comes: the key's, raised by earlier writing admissions that
    -- passed (one that passed but was stale is below it, so taking it changes nothing).
    SELECT p.*,
           greatest(p.fence,
                    max(p.token) FILTER (WHERE p.rec <> 'f' AND p.passes)
                      OVER (PARTITION BY p.lock ORDER BY p.ord
                            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)) AS h
      FROM passing p
  ), judged AS (
    SELECT r.*,
           CASE
             WHEN NOT r.found THEN 'forged'
             WHEN r.token <= r.floor THEN 'stale'
             WHEN r.issued IS NULL OR r.token > r.issued THEN 'forged'
             WHEN r.h IS NOT NULL AND r.token < r.h THEN 'stale'
             WHEN r.lease AND NOT coalesce(r.lease_live, false) THEN 'lease-expired'
             ELSE 'ok'
           END AS verdict
      FROM running r
  ), counted AS (
    SELECT j.*,
           CASE WHEN j.verdict <> 'ok' OR j.rec = 's' THEN 0 ELSE
             (SELECT count(*) FROM {schema}.inflight i
                LEFT JOIN {schema}.gateway_sessions s ON s.id = i.session_id
               WHERE i.lock = j.lock AND i.token < j.token
                 AND (s.id IS NOT NULL OR i.bound_ms > 0))::int
             + (SELECT count(*) FROM judged k
                 WHERE k.lock = j.lock AND k.ord < j.ord AND k.rec = 't' AND k.verdict = 'ok'
                   AND k.token < j.token
                   AND EXISTS (SELECT 1 FROM {schema}.gateway_sessions s WHERE s.id = k.session_id))::int
           END AS lower
      FROM judged j
  ), fence AS (
    UPDATE {schema}.locks l
       SET highest = CASE WHEN m.top IS NOT NULL AND (l.highest IS NULL OR l.highest < m.top)
                          THEN m.top ELSE l.highest END,
           shadow_highest = CASE WHEN m.shadow IS NOT NULL
                                  AND (l.shadow_highest IS NULL OR l.shadow_highest < m.shadow)
                                 THEN m.shadow ELSE l.shadow_highest END
      FROM (SELECT c.lock,
                   max(c.token) FILTER (WHERE c.rec = 't') AS top,
                   max(c.token) FILTER (WHERE c.rec = 's') AS shadow
              FROM counted c
             WHERE c.rec <> 'f' AND c.verdict = 'ok' GROUP BY c.lock) m
     WHERE l.key = m.lock
       AND ((m.top IS NOT NULL AND (l.highest IS NULL OR l.highest < m.top))
         OR (m.shadow IS NOT NULL AND (l.shadow_highest IS NULL OR l.shadow_highest < m.shadow)))
  ), entry AS (
    INSERT INTO {schema}.inflight (lock, request_id, token, session_id, bound_ms)
    SELECT c.lock, c.request_id, c.token, c.session_id,
           CASE WHEN c.lower = 0 THEN greatest(c.bound, 0) ELSE 0 END
      FROM counted c
     WHERE c.rec = 't' AND c.verdict = 'ok'
    ON CONFLICT (lock, request_id) DO UPDATE
       SET token = excluded.token, session_id = excluded.session_id, bound_ms = excluded.bound_ms
  )
  SELECT c.ord,
         c.verdict,
         (CASE WHEN c.verdict = 'ok' THEN greatest(c.h, c.token) ELSE c.h END)::text,
         c.lower,
         n.epoch_id,
         n.epoch_floor::text
    FROM counted c CROSS JOIN n
   ORDER BY c.ord;
END
$fn$;
